package familykit

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"

	"fastvideo/fastvideo/api"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/lora"
	"fastvideo/internal/randweights"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

// TestLoadMergedBF16: a merged tensor comes back in the dtype the base stores it in (bf16, rounded to
// nearest even from the float32 merge); a zero up-projection and untouched tensors come back
// bit-identical, as copies the loader owns.
func TestLoadMergedBF16(t *testing.T) {
	const n = 8
	vals := make([]float32, n*n)
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i))) * 0.7
	}
	bf := func(v []float32) []byte {
		out := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], bfloat16.FromFloat32(x).Bits())
		}
		return out
	}
	base := weights.MapSource{
		"m.weight": {Name: "m.weight", DType: safetensors.BF16, Shape: []int{n, n}, Data: bf(vals)},
		"o.weight": {Name: "o.weight", DType: safetensors.BF16, Shape: []int{n}, Data: bf(vals[:n])},
	}
	names := lora.NameMap{Model: "the test model", Map: func(m string, _ bool) (lora.Target, bool) {
		return lora.Target{Weight: m + ".weight"}, m == "m"
	}}
	dir := t.TempDir()
	for _, zero := range []bool{true, false} {
		path := testutil.WriteLoRA(t, dir, map[bool]string{true: "z.safetensors", false: "r.safetensors"}[zero], 1,
			testutil.LoRAModule{Module: "m", In: n, Out: n, Rank: 2, ZeroUp: zero, Scale: 0.3})
		l, err := OpenLoRA([]api.LoRA{{Path: path, Strength: 1.5}}, names, SourceShapes(base))
		if err != nil {
			t.Fatal(err)
		}
		got, err := LoadMerged(l, base, func(src weights.Source) (map[string]safetensors.Info, error) {
			out := map[string]safetensors.Info{}
			for _, name := range src.Names() {
				out[name], _ = src.Tensor(name)
			}
			return out, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The reference: decode, Merge in float32, round to bf16.
		want := lora.TensorMap{"m.weight": {Shape: []int{n, n}, Data: append([]float32(nil), mustF32(t, base["m.weight"])...)}}
		if _, err := lora.Merge(l.Adapters, names, want); err != nil {
			t.Fatal(err)
		}
		m, o := got["m.weight"], got["o.weight"]
		if m.DType != safetensors.BF16 || !bytes.Equal(m.Data, bf(want["m.weight"].Data)) {
			t.Errorf("zero=%v: merged m.weight is %s and differs from the bf16 of the float32 merge", zero, m.DType)
		}
		if zero != bytes.Equal(m.Data, base["m.weight"].Data) {
			t.Errorf("zero=%v: m.weight unchanged = %v", zero, !zero)
		}
		if !bytes.Equal(o.Data, base["o.weight"].Data) || &o.Data[0] == &base["o.weight"].Data[0] {
			t.Error("an untouched tensor changed, or was not copied")
		}
		l.Close()
	}
}

func mustF32(t *testing.T, info safetensors.Info) []float32 {
	v, err := info.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMergeOnBind: adapters merged into weights as they are drawn on the device (random weights) equal
// the host merge of the same draw: within float32 rounding where the low-rank products form on the
// device (f32 weights), bit for bit where a dense delta sends the merge to the host; a bf16 weight stays
// bf16; a zero up-projection leaves the draw bit-identical, and a weight no adapter touches is left
// alone.
func TestMergeOnBind(t *testing.T) {
	const n = 8
	backend := testutil.Backend(t)
	names := lora.NameMap{Model: "the test model", Map: func(m string, _ bool) (lora.Target, bool) {
		return lora.Target{Weight: m + ".weight"}, m == "m"
	}}
	shapes := lora.Shapes{"m.weight": {n, n}, "o.weight": {n}}
	draw := func(dt dtypes.DType, hook func(*weights.Param) error) map[string][]float32 {
		set := weights.NewSet("")
		set.Add("m.weight", n, n)
		set.Add("o.weight", n)
		set.AfterBindAll(hook)
		if err := randweights.FillRandom(backend, set, dt, 3, randweights.FixtureDraw); err != nil {
			t.Fatal(err)
		}
		defer set.Release()
		out := map[string][]float32{}
		for _, p := range set.Params() {
			v, err := graphexec.HostF32(p.T)
			if err != nil || p.T.DType() != dt {
				t.Fatalf("%s: %s, %v", p.Name, p.T.DType(), err)
			}
			out[p.Name] = v
		}
		return out
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		dt      dtypes.DType
		mod     testutil.LoRAModule
		changes bool
		tol     float64 // 0: bit for bit
	}{
		{"low rank on the device", dtypes.Float32, testutil.LoRAModule{Module: "m", In: n, Out: n, Rank: 2, Scale: 0.3}, true, 1e-6},
		{"zero up-projection", dtypes.BFloat16, testutil.LoRAModule{Module: "m", In: n, Out: n, Rank: 2, ZeroUp: true, Scale: 0.3}, false, 0},
		{"dense delta on the host", dtypes.BFloat16, testutil.LoRAModule{}, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := strings.ReplaceAll(c.name, " ", "_") + ".safetensors"
			var path string
			if c.mod.Module == "" { // a .diff payload: no low-rank pair
				diff := make([]float32, n*n)
				for i := range diff {
					diff[i] = 0.1 * float32(math.Cos(float64(i)))
				}
				path = testutil.WriteSafetensors(t, dir, file, []safetensors.Tensor{
					{Name: "m.diff", DType: safetensors.F32, Shape: []int{n, n}, Data: safetensors.F32Bytes(diff)}}, nil)
			} else {
				path = testutil.WriteLoRA(t, dir, file, 1, c.mod)
			}
			l, err := OpenLoRA([]api.LoRA{{Path: path, Strength: 1.5}}, names, shapes)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			hook, done, err := l.MergeOnBind(func() (lora.Shapes, error) { return shapes, nil })
			if err != nil {
				t.Fatal(err)
			}
			base, got := draw(c.dt, nil), draw(c.dt, hook)
			done()
			want := lora.TensorMap{"m.weight": {Shape: []int{n, n}, Data: slices.Clone(base["m.weight"])}}
			if _, err := lora.Merge(l.Adapters, names, want); err != nil {
				t.Fatal(err)
			}
			if c.dt == dtypes.BFloat16 {
				for i, v := range want["m.weight"].Data {
					want["m.weight"].Data[i] = bfloat16.FromFloat32(v).Float32()
				}
			}
			if d := testutil.Compare(got["m.weight"], want["m.weight"].Data); d.MaxAbs > c.tol || (c.tol == 0 && !testutil.SameBits(got["m.weight"], want["m.weight"].Data)) {
				t.Errorf("m.weight differs from the host merge by %g (tolerance %g)", d.MaxAbs, c.tol)
			}
			if c.changes == testutil.SameBits(got["m.weight"], base["m.weight"]) {
				t.Errorf("m.weight changed: %v, want %v", !c.changes, c.changes)
			}
			if !testutil.SameBits(got["o.weight"], base["o.weight"]) {
				t.Error("a weight no adapter touches changed")
			}
		})
	}
	if hook, _, err := (*LoRA)(nil).MergeOnBind(nil); hook != nil || err != nil {
		t.Errorf("no adapters: hook %v, %v", hook != nil, err)
	}
}
