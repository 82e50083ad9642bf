package lora

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/x448/float16"

	"fastvideo/internal/safetensors"
)

// tens is one tensor of a test adapter; raw, when set, replaces the encoded values.
type tens struct {
	name  string
	dt    safetensors.DType
	shape []int
	vals  []float32
	raw   []byte
}

func ft(name string, shape []int, vals ...float32) tens {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if len(vals) == 0 {
		vals = make([]float32, n)
		for i := range vals {
			vals[i] = float32(i%7)*0.25 - 0.5
		}
	}
	return tens{name: name, dt: safetensors.F32, shape: shape, vals: vals}
}

func encode(x tens) []byte {
	if x.raw != nil {
		return x.raw
	}
	switch x.dt {
	case safetensors.F16:
		b := make([]byte, 2*len(x.vals))
		for i, v := range x.vals {
			binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(v).Bits())
		}
		return b
	case safetensors.BF16:
		b := make([]byte, 2*len(x.vals))
		for i, v := range x.vals {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
		}
		return b
	case safetensors.I32:
		b := make([]byte, 4*len(x.vals))
		for i, v := range x.vals {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
		}
		return b
	}
	return safetensors.F32Bytes(x.vals)
}

func build(t *testing.T, meta map[string]string, ts ...tens) (*Adapter, error) {
	t.Helper()
	var list []safetensors.Tensor
	for _, x := range ts {
		list = append(list, safetensors.Tensor{Name: x.name, DType: x.dt, Shape: x.shape, Data: encode(x)})
	}
	f, err := safetensors.FromTensors(list, meta)
	if err != nil {
		t.Fatal(err)
	}
	return FromFile("test.safetensors", f)
}

func mustBuild(t *testing.T, meta map[string]string, ts ...tens) *Adapter {
	t.Helper()
	a, err := build(t, meta, ts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// identity maps module m onto m.weight / m.bias.
var identity = NameMap{Model: "the test model", Map: func(m string, musubi bool) (Target, bool) {
	if strings.HasPrefix(m, "other.") {
		return Target{}, false
	}
	return Target{Weight: m + ".weight", Bias: m + ".bias"}, true
}}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one naming %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q lacks %q", err, p)
		}
	}
}

// TestBadAdapters: every malformed adapter is refused at open, naming the key, the value and a fix.
func TestBadAdapters(t *testing.T) {
	nan32 := make([]byte, 16*4)
	binary.LittleEndian.PutUint32(nan32[5*4:], 0x7fc00000)
	infBF := make([]byte, 16*2)
	binary.LittleEndian.PutUint16(infBF[3*2:], 0xff80)
	nanF16 := make([]byte, 8*2)
	binary.LittleEndian.PutUint16(nanF16[2:], 0x7e00)
	big := 1025
	for _, c := range []struct {
		name string
		meta map[string]string
		ts   []tens
		want []string
	}{
		{"unknown key", nil, []tens{ft("blocks.0.attn1.to_q.weight", []int{2, 2})},
			[]string{`"blocks.0.attn1.to_q.weight"`, "is not a LoRA tensor", "is this file a LoRA adapter"}},
		{"dora", nil, []tens{ft("m.dora_scale", []int{2})}, []string{`"m.dora_scale"`, "DoRA", "plain LoRA"}},
		{"A without B", nil, []tens{ft("m.lora_A.weight", []int{2, 8})},
			[]string{`"m.lora_A.weight"`, "no up-projection partner", "m.lora_B.weight", "truncated"}},
		{"B without A", nil, []tens{ft("m.lora_up.weight", []int{8, 2})},
			[]string{`"m.lora_up.weight"`, "no down-projection partner"}},
		{"alpha without pair", nil, []tens{ft("m.alpha", nil, 4), ft("m.diff", []int{2, 2})},
			[]string{`"m.alpha"`, "no lora_A/lora_B"}},
		{"rank mismatch", nil, []tens{ft("m.lora_A.weight", []int{4, 8}), ft("m.lora_B.weight", []int{8, 3})},
			[]string{"rank mismatch", `"m.lora_A.weight"`, `"m.lora_B.weight"`, "[4 8]", "[8 3]", "A must be [r,in] and B [out,r]"}},
		{"rank above min(in,out)", nil, []tens{ft("m.lora_down.weight", []int{9, 8}), ft("m.lora_up.weight", []int{16, 9})},
			[]string{`"m.lora_down.weight"`, "rank 9", "absurd", "min(in, out) = 8"}},
		{"rank above the limit", nil, []tens{
			{name: "m.lora_A.weight", dt: safetensors.BF16, shape: []int{big, 2048}, raw: make([]byte, 2*big*2048)},
			{name: "m.lora_B.weight", dt: safetensors.BF16, shape: []int{2048, big}, raw: make([]byte, 2*big*2048)}},
			[]string{"rank 1025", "limit 1024", "dense matrix"}},
		{"3-D factor", nil, []tens{ft("m.lora_A.weight", []int{2, 4, 1}), ft("m.lora_B.weight", []int{4, 2})},
			[]string{`"m.lora_A.weight"`, "2-D"}},
		{"NaN f32", nil, []tens{{name: "m.lora_A.weight", dt: safetensors.F32, shape: []int{2, 8}, raw: nan32}, ft("m.lora_B.weight", []int{8, 2})},
			[]string{`"m.lora_A.weight"`, "NaN or infinite", "element 5", "another checkpoint"}},
		{"Inf bf16", nil, []tens{ft("m.lora_A.weight", []int{2, 8}), {name: "m.lora_B.weight", dt: safetensors.BF16, shape: []int{8, 2}, raw: infBF}},
			[]string{`"m.lora_B.weight"`, "NaN or infinite", "element 3"}},
		{"NaN f16 diff_b", nil, []tens{{name: "m.diff_b", dt: safetensors.F16, shape: []int{8}, raw: nanF16}},
			[]string{`"m.diff_b"`, "NaN or infinite"}},
		{"int8 factor", nil, []tens{{name: "m.lora_A.weight", dt: safetensors.I8, shape: []int{2, 8}, raw: make([]byte, 16)}, ft("m.lora_B.weight", []int{8, 2})},
			[]string{`"m.lora_A.weight"`, "dtype I8", "F32, F16 or BF16", "re-save"}},
		{"alpha zero", nil, []tens{ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}), ft("m.alpha", nil, 0)},
			[]string{`"m.alpha"`, "must be positive", "remove the key"}},
		{"alpha NaN", nil, []tens{ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}), ft("m.alpha", nil, float32(math.NaN()))},
			[]string{`"m.alpha"`, "NaN"}},
		{"alpha vector", nil, []tens{ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}), ft("m.alpha", []int{2})},
			[]string{`"m.alpha"`, "[2]", "one value"}},
		{"lora_rank disagrees", nil, []tens{ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}),
			{name: "m.lora_rank", dt: safetensors.I32, shape: []int{1}, vals: []float32{4}}},
			[]string{`"m.lora_rank"`, "rank [4]", "rank 2", "remove the .lora_rank key"}},
		{"one module spelled twice", nil, []tens{ft("diffusion_model.m.lora_down.weight", []int{2, 8}), ft("m.lora_down.weight", []int{2, 8})},
			[]string{`"diffusion_model.m.lora_down.weight"`, `"m.lora_down.weight"`, "spells one module twice"}},
		{"two PEFT adapters", nil, []tens{ft("m.lora_A.default.weight", []int{2, 8}), ft("m.lora_A.style.weight", []int{2, 8})},
			[]string{`"m.lora_A.style.weight"`, `"default"`, "several adapters"}},
		{"set and diff", nil, []tens{ft("m.set_weight", []int{2, 2}), ft("m.diff", []int{2, 2})},
			[]string{`"m.set_weight"`, "one or the other"}},
		{"lora bias of wrong size", nil, []tens{ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}), ft("m.lora_B.bias", []int{4})},
			[]string{`"m.lora_B.bias"`, "[4]", "must be [8]"}},
		{"metadata not JSON", map[string]string{MetadataKey: "{oops"}, []tens{ft("m.diff", []int{2})},
			[]string{MetadataKey, "not a JSON object", "alpha = rank"}},
		{"metadata alpha negative", map[string]string{MetadataKey: `{"transformer.lora_alpha": -2}`}, []tens{ft("m.diff", []int{2})},
			[]string{`"transformer.lora_alpha"`, "-2", "finite positive"}},
		{"metadata DoRA", map[string]string{MetadataKey: `{"use_dora": true}`}, []tens{ft("m.diff", []int{2})},
			[]string{`"use_dora"`, "not supported", "plain LoRA"}},
		{"metadata bad pattern", map[string]string{MetadataKey: `{"alpha_pattern": {"a(": 2}}`}, []tens{ft("m.diff", []int{2})},
			[]string{`"a("`, "regular expression"}},
		{"empty", nil, nil, []string{"holds no tensors"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := build(t, c.meta, c.ts...)
			wantErr(t, err, c.want...)
		})
	}
}

// TestOpenRefusesBadFiles: a folder, and a header whose shape's byte size overflows.
func TestOpenRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	wantErr(t, err, "not a regular file")
	hdr := []byte(`{"m.lora_A.weight":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}}`)
	img := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	img = append(img, hdr...)
	path := filepath.Join(dir, "big.safetensors")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path)
	wantErr(t, err, `"m.lora_A.weight"`, "overflows")
}

// TestAlphaSources: a module's own key, the metadata pattern, the metadata alpha, the default; values kept
// exact (0.5 is not truncated to 0).
func TestAlphaSources(t *testing.T) {
	meta := map[string]string{MetadataKey: `{"transformer.lora_alpha": 6, "transformer.alpha_pattern": {"blocks.1.attn1.to_q": 2.5}}`}
	pair := func(m string) []tens {
		return []tens{ft(m+".lora_A.weight", []int{4, 8}), ft(m+".lora_B.weight", []int{8, 4})}
	}
	ts := append(pair("transformer.blocks.0.attn1.to_q"), pair("transformer.blocks.1.attn1.to_q")...)
	ts = append(ts, pair("blocks.0.x")...)
	ts = append(ts, ft("blocks.0.x.alpha", nil, 0.5))
	ts = append(ts, pair("blocks.0.y")...)
	ts = append(ts, ft("blocks.0.y.lora_alpha", []int{1}, 3.5))
	a := mustBuild(t, meta, ts...)
	got := map[string]*Update{}
	for _, u := range a.Updates {
		got[u.Module] = u
	}
	for m, want := range map[string]struct {
		alpha float64
		from  string
	}{
		"blocks.0.attn1.to_q": {6, MetadataKey + " lora_alpha"},
		"blocks.1.attn1.to_q": {2.5, "alpha_pattern blocks.1.attn1.to_q"},
		"blocks.0.x":          {0.5, "blocks.0.x.alpha"},
		"blocks.0.y":          {3.5, "blocks.0.y.lora_alpha"},
	} {
		u := got[m]
		if u == nil || u.Alpha != want.alpha || !strings.Contains(u.AlphaFrom, want.from) {
			t.Errorf("%s: %+v, want alpha %v from %q", m, u, want.alpha, want.from)
		}
	}
	if u := got["blocks.0.x"]; u.Scale() != 0.125 {
		t.Errorf("scale %v, want 0.5/4", u.Scale())
	}
	// Fields of other pipeline components do not apply; "^" anchors a pattern at the module's start.
	meta = map[string]string{MetadataKey: `{"text_encoder.lora_alpha": 1, "lora_alpha": 8, "alpha_pattern": {"^x.m": 2, "n": 3}}`}
	c := mustBuild(t, meta, append(append(append(pair("y.x.m"), pair("x.m")...), pair("y.n")...), pair("yn")...)...)
	for i, want := range []float64{2, 3, 8, 8} { // sorted: x.m, y.n, y.x.m, yn
		if u := c.Updates[i]; u.Alpha != want {
			t.Errorf("%s: alpha %v (%s), want %v", u.Module, u.Alpha, u.AlphaFrom, want)
		}
	}
	b := mustBuild(t, nil, pair("m")...)
	if u := b.Updates[0]; u.Alpha != 4 || u.AlphaFrom != "default (alpha = rank)" || u.Scale() != 1 {
		t.Errorf("default: %+v", u)
	}
	// The caller's default replaces alpha = rank only where the file states none.
	if err := a.SetDefaultAlpha(8); err != nil {
		t.Fatal(err)
	}
	if err := b.SetDefaultAlpha(8); err != nil {
		t.Fatal(err)
	}
	if u := b.Updates[0]; u.Alpha != 8 || u.Scale() != 2 {
		t.Errorf("default alpha 8: %+v", u)
	}
	if got["blocks.0.x"].Alpha != 0.5 || got["blocks.0.attn1.to_q"].Alpha != 6 {
		t.Error("SetDefaultAlpha changed an alpha the file states")
	}
	wantErr(t, b.SetDefaultAlpha(math.NaN()), "default alpha NaN", "finite positive")
}

// TestKeyNames: prefixes, PEFT adapter names, musubi names and diff_m are normalized.
func TestKeyNames(t *testing.T) {
	for key, want := range map[string]parsedKey{
		"base_model.model.transformer.blocks.0.attn1.to_q.lora_A.default.weight": {module: "blocks.0.attn1.to_q", role: roleA, adapter: "default"},
		"diffusion_model.blocks.0.self_attn.q.lora_up.weight":                    {module: "blocks.0.self_attn.q", role: roleB},
		"lora_unet_blocks_0_self_attn_q.alpha":                                   {module: "blocks_0_self_attn_q", role: roleAlpha, musubi: true},
		"diffusion_model.blocks.3.diff_m":                                        {module: "blocks.3.modulation", role: roleDiff},
		"head.head.diff_b":                                                       {module: "head.head", role: roleDiffBias},
		"to_out.0.lora_B.bias":                                                   {module: "to_out.0", role: roleLoRABias},
	} {
		p, err := parseKey(key)
		if err != nil || p.module != want.module || p.role != want.role || p.adapter != want.adapter || p.musubi != want.musubi {
			t.Errorf("%s: %+v %v, want %+v", key, p, err, want)
		}
	}
}

// TestZeroUpProjection: B = 0 (with -0.0 entries), zero deltas and strength 0 leave every weight bit-identical,
// -0.0 included.
func TestZeroUpProjection(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	zeroB := make([]float32, 8*2)
	zeroB[3] = negZero
	a := mustBuild(t, nil, ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}, zeroB...),
		ft("m.lora_B.bias", []int{8}, make([]float32, 8)...), ft("n.diff", []int{4}, make([]float32, 4)...))
	nonzero := mustBuild(t, nil, ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}))
	w := weightsFor(negZero)
	before := snapshot(w)
	set := mustBuild(t, nil, ft("m.set_weight", []int{8, 8}))
	for _, ad := range []Weighted{{a, 1}, {a, -3}, {nonzero, 0}, {set, 0}} {
		if _, err := Merge([]Weighted{ad}, identity, w); err != nil {
			t.Fatal(err)
		}
		for n, t0 := range before {
			for i, v := range w[n].Data {
				if math.Float32bits(v) != t0[i] {
					t.Fatalf("%s[%d] changed from %#x to %#x", n, i, t0[i], math.Float32bits(v))
				}
			}
		}
	}
}

func weightsFor(negZero float32) TensorMap {
	w := TensorMap{
		"m.weight": {Shape: []int{8, 8}, Data: make([]float32, 64)},
		"m.bias":   {Shape: []int{8}, Data: make([]float32, 8)},
		"n.weight": {Shape: []int{4}, Data: []float32{negZero, 0, 1, -2}},
	}
	for i := range w["m.weight"].Data {
		w["m.weight"].Data[i] = float32(i%5) - 2
	}
	w["m.weight"].Data[0], w["m.weight"].Data[9], w["m.bias"].Data[2] = negZero, negZero, negZero
	return w
}

func snapshot(w TensorMap) map[string][]uint32 {
	out := map[string][]uint32{}
	for n, t := range w {
		for _, v := range t.Data {
			out[n] = append(out[n], math.Float32bits(v))
		}
	}
	return out
}

// TestMergeMath: W += s·(α/r)·B·A, bias += s·(α/r)·lora_B.bias + s·diff_b, dense += s·diff, in order.
func TestMergeMath(t *testing.T) {
	av := []float32{1, 2, 0, -1, 0.5, 1} // [2, 3]
	bv := []float32{1, 0, 0, 2}          // [2, 2]
	ad := mustBuild(t, nil, ft("m.lora_A.weight", []int{2, 3}, av...), ft("m.lora_B.weight", []int{2, 2}, bv...),
		ft("m.alpha", nil, 0.5), ft("m.lora_B.bias", []int{2}, 1, 1), ft("m.diff_b", []int{2}, 2, -2), ft("m.diff", []int{2, 3}, 1, 1, 1, 1, 1, 1))
	w := TensorMap{"m.weight": {Shape: []int{2, 3}, Data: make([]float32, 6)}, "m.bias": {Shape: []int{2}, Data: make([]float32, 2)}}
	u := ad.Updates[0]
	fa, fb, err := u.Factors()
	lb, db, err2 := u.BiasDeltas()
	diff, set, err3 := u.Dense()
	if err != nil || err2 != nil || err3 != nil || fa[5] != 1 || fb[3] != 2 || lb[0] != 1 || db[1] != -2 || len(diff) != 6 || set != nil {
		t.Fatalf("accessors: %v %v %v %v %v %v %v %v %v", fa, fb, lb, db, diff, set, err, err2, err3)
	}
	touched, err := Merge([]Weighted{{ad, 2}, {ad, 2}}, identity, w)
	if err != nil {
		t.Fatal(err)
	}
	// one pass: s=2, α/r = 0.25: B·A = [[1,2,0],[-2,1,2]] → 0.5·BA + 2·1
	want := []float32{2 * 2.5, 2 * 3, 2 * 2, 2 * 1, 2 * 2.5, 2 * 3}
	for i, v := range w["m.weight"].Data {
		if v != want[i] {
			t.Fatalf("weight %v, want %v", w["m.weight"].Data, want)
		}
	}
	if b := w["m.bias"].Data; b[0] != 2*(0.5+4) || b[1] != 2*(0.5-4) {
		t.Errorf("bias %v", b)
	}
	if len(touched) != 2 || touched[0].Modules != 1 || strings.Join(touched[0].Tensors, ",") != "m.bias,m.weight" {
		t.Errorf("touched %+v", touched)
	}
}

// TestMergeRefusals: unmatched modules, missing or misshapen targets and a bad strength are refused before any
// weight changes.
func TestMergeRefusals(t *testing.T) {
	good := mustBuild(t, nil, ft("m.lora_A.weight", []int{2, 8}), ft("m.lora_B.weight", []int{8, 2}))
	for _, c := range []struct {
		name string
		ad   *Adapter
		s    float64
		want []string
	}{
		{"unmatched", mustBuild(t, nil, ft("other.x.lora_A.weight", []int{2, 8}), ft("other.x.lora_B.weight", []int{8, 2})), 1,
			[]string{"1 of 1 modules", `"other.x.lora_A.weight"`, "the test model", "use an adapter for"}},
		{"missing target", mustBuild(t, nil, ft("q.lora_A.weight", []int{2, 8}), ft("q.lora_B.weight", []int{8, 2})), 1,
			[]string{`"q"`, `"q.weight"`, "lack"}},
		{"shape", mustBuild(t, nil, ft("m.lora_A.weight", []int{2, 4}), ft("m.lora_B.weight", []int{8, 2})), 1,
			[]string{`"m.lora_B.weight"`, "[8, 4]", "[8 8]", "another size"}},
		{"strength", good, math.Inf(1), []string{"strength +Inf", "finite"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := weightsFor(0)
			before := snapshot(w)
			_, err := Merge([]Weighted{{good, 1}, {c.ad, c.s}}, identity, w)
			wantErr(t, err, c.want...)
			assertUnchanged(t, w, before)
		})
	}
}

// TestMergeRowsInParallel: a module large enough to be split over goroutines matches a float64 reference.
func TestMergeRowsInParallel(t *testing.T) {
	const r, in, out = 32, 96, 80
	rnd := func(n int, seed float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(float64(i)*0.37 + seed))
		}
		return v
	}
	av, bv, w0 := rnd(r*in, 1), rnd(out*r, 2), rnd(out*in, 3)
	ad := mustBuild(t, nil, ft("m.lora_A.weight", []int{r, in}, av...), ft("m.lora_B.weight", []int{out, r}, bv...), ft("m.alpha", nil, 12.5))
	w := TensorMap{"m.weight": {Shape: []int{out, in}, Data: append([]float32(nil), w0...)}}
	if _, err := Merge([]Weighted{{ad, 0.75}}, identity, w); err != nil {
		t.Fatal(err)
	}
	scale := 0.75 * 12.5 / r
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			var s float64
			for k := 0; k < r; k++ {
				s += float64(bv[o*r+k]) * float64(av[k*in+i])
			}
			want := float64(w0[o*in+i]) + scale*s
			if got := w["m.weight"].Data[o*in+i]; math.Abs(float64(got)-want) > 1e-4*math.Max(1, math.Abs(want)) {
				t.Fatalf("[%d,%d] = %g, want %g", o, i, got, want)
			}
		}
	}
}

// assertUnchanged fails the test when a weight of w no longer has the bits snapshot took before.
func assertUnchanged(t *testing.T, w TensorMap, before map[string][]uint32) {
	t.Helper()
	for n, t0 := range before {
		for i, v := range w[n].Data {
			if math.Float32bits(v) != t0[i] {
				t.Fatalf("a refused merge changed %s[%d]", n, i)
			}
		}
	}
}
