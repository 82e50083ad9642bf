package lora

import (
	"os"
	"path/filepath"
	"testing"

	"fastvideo/internal/safetensors"
)

// FuzzFromFile: no safetensors image makes reading an adapter, or merging it into weights of the shapes it
// names, panic.
func FuzzFromFile(f *testing.F) {
	paths, _ := filepath.Glob("testdata/lora_*.safetensors")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil && len(data) < 1<<16 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := safetensors.FromBytes(data)
		if err != nil {
			return
		}
		a, err := FromFile("fuzz", st)
		if err != nil {
			return
		}
		w := TensorMap{}
		for _, u := range a.Updates {
			if _, _, err := u.Factors(); err != nil && u.HasLowRank() {
				t.Fatal(err)
			}
			if u.HasLowRank() && u.Out*u.In <= 1<<20 {
				w[u.Module+".weight"] = &Tensor{Shape: []int{u.Out, u.In}, Data: make([]float32, u.Out*u.In)}
			}
		}
		_, _ = Merge([]Weighted{{a, 1}}, identity, w)
	})
}
