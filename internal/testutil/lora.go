package testutil

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/lora"
	"fastvideo/internal/safetensors"
)

// LoRAModule is one low-rank module of a test adapter: A [Rank, In] drawn from the seed, B [Out, Rank]
// drawn too unless ZeroUp (then all zeros: the adapter changes nothing).
type LoRAModule struct {
	Module          string // e.g. "blocks.0.self_attn.q" (written with .lora_down/.lora_up/.alpha)
	In, Out, Rank   int
	Alpha           float32
	ZeroUp          bool
	Scale           float32 // of the random values (0: 0.05)
	NaN             bool    // poisons one value of A
	RankB           int     // B's rank when it differs from A's (a rank mismatch)
	PEFT, WithAlpha bool    // PEFT names (lora_A/lora_B); WithAlpha writes .alpha (native names always do)
}

// WriteLoRA writes an adapter of the modules to dir/name (F32) and returns its path.
func WriteLoRA(t testing.TB, dir, name string, seed uint64, mods ...LoRAModule) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var list []safetensors.Tensor
	draw := func(n int, scale float32, zero bool) []float32 {
		v := make([]float32, n)
		if !zero {
			for i := range v {
				v[i] = scale * float32(rng.NormFloat64())
			}
		}
		return v
	}
	for _, m := range mods {
		scale := m.Scale
		if scale == 0 {
			scale = 0.05
		}
		rb := m.RankB
		if rb == 0 {
			rb = m.Rank
		}
		a, b := draw(m.Rank*m.In, scale, false), draw(m.Out*rb, scale, m.ZeroUp)
		if m.NaN {
			a[len(a)/2] = float32(math.NaN())
		}
		down, up := ".lora_down.weight", ".lora_up.weight"
		if m.PEFT {
			down, up = ".lora_A.weight", ".lora_B.weight"
		}
		list = append(list,
			safetensors.Tensor{Name: m.Module + down, DType: safetensors.F32, Shape: []int{m.Rank, m.In}, Data: safetensors.F32Bytes(a)},
			safetensors.Tensor{Name: m.Module + up, DType: safetensors.F32, Shape: []int{m.Out, rb}, Data: safetensors.F32Bytes(b)})
		if !m.PEFT || m.WithAlpha {
			alpha := m.Alpha
			if alpha == 0 {
				alpha = float32(m.Rank)
			}
			list = append(list, safetensors.Tensor{Name: m.Module + ".alpha", DType: safetensors.F32, Shape: []int{}, Data: safetensors.F32Bytes([]float32{alpha})})
		}
	}
	return WriteSafetensors(t, dir, name, list, nil)
}

// WriteSafetensors writes tensors (and header metadata) to dir/name and returns its path.
func WriteSafetensors(t testing.TB, dir, name string, list []safetensors.Tensor, meta map[string]string) string {
	t.Helper()
	img, err := safetensors.Encode(list, meta)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Adapter opens the tensors ts (with header metadata meta) as a LoRA adapter file named name, in
// memory, failing the test when the file does not encode; the adapter's own validation error is
// returned for the test to check.
func Adapter(t testing.TB, name string, meta map[string]string, ts ...safetensors.Tensor) (*lora.Adapter, error) {
	t.Helper()
	f, err := safetensors.FromTensors(ts, meta)
	if err != nil {
		t.Fatal(err)
	}
	return lora.FromFile(name, f)
}

// FixtureAdapter opens the fixture's tensors under "lora." (the prefix cut) as an adapter, closed when
// the test ends.
func FixtureAdapter(t testing.TB, fx *Fixture) *lora.Adapter {
	t.Helper()
	var list []safetensors.Tensor
	for _, name := range fx.Names("lora.") {
		info := fx.Info(t, name)
		list = append(list, safetensors.Tensor{Name: strings.TrimPrefix(name, "lora."), DType: info.DType, Shape: info.Shape, Data: info.Data})
	}
	ad, err := Adapter(t, fx.Name+".lora", nil, list...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ad.Close() })
	return ad
}

// CheckLoRATargets checks a DiT's LoRA name map (target, the package's LoRATarget) against the
// tensors the model declares (have, its Params' map): every module must be mapped; every tensor a
// module names must be declared, unless absent (nil: none) says the model variant lacks it; and a
// weight whose bias is declared must name that bias, or the merge would leave it stale. model names
// the DiT in the errors.
func CheckLoRATargets(t testing.TB, model string, target func(module string, musubi bool) (lora.Target, bool),
	have map[string][]int, modules []string, absent func(tensor string) bool) {
	t.Helper()
	for _, m := range modules {
		tg, ok := target(m, false)
		if !ok {
			t.Errorf("%s: not mapped", m)
			continue
		}
		for _, n := range []string{tg.Weight, tg.Bias} {
			if n != "" && have[n] == nil && (absent == nil || !absent(n)) {
				t.Errorf("%s -> %s: not a tensor of the %s DiT", m, n, model)
			}
		}
		if tg.Bias == "" && have[strings.TrimSuffix(tg.Weight, ".weight")+".bias"] != nil {
			t.Errorf("%s: the checkpoint has a bias the map does not name", m)
		}
	}
}
