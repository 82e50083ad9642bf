package xlaext_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/testutil"
	"fastvideo/internal/xlaext"
)

// mosaicDraftTemplate is bench/vsa_mosaic_draft.py's kernel as a template: its module text lowered on an H100 at
// three geometries (bench/mosaic_text_probe.py: the H3, FastH3's tiling, Wan 1.3B at 0.8) and made into
// a template by testdata/mosaic_template.py, fitted on the first two and checked at the third:
//
//	python3 bench/mosaic_text_probe.py --upstream DIR --outdir OUT h3 h3_tiling wan0.8    # on the GPU machine
//	python3 internal/xlaext/testdata/mosaic_template.py --out internal/xlaext/testdata/mosaic_draft_template.json.gz \
//	  'H=56,T=289,K=37:OUT/draft_h3_tiling.mlir' 'H=12,T=512,K=103:OUT/draft_wan0.8.mlir' 'H=56,T=234,K=23:OUT/draft_h3.mlir'
const mosaicDraftTemplate = "testdata/mosaic_draft_template.json.gz"

// draftTemplate is the template of mosaicDraftTemplate.
func draftTemplate(t *testing.T) *xlaext.MosaicTemplate {
	t.Helper()
	data, err := os.ReadFile(mosaicDraftTemplate)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := xlaext.ParseMosaicTemplate(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestMosaicTemplateGivesJAXText: at every geometry it was made from, the template gives JAX's module text
// back byte for byte (its SHA-256 as the template records it).
func TestMosaicTemplateGivesJAXText(t *testing.T) {
	tmpl := draftTemplate(t)
	if len(tmpl.Checks) < 3 {
		t.Fatalf("%d geometries checked; the template needs at least three (two fitted, one held out)", len(tmpl.Checks))
	}
	for _, c := range tmpl.Checks {
		text, err := tmpl.Instantiate(c.Params)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(text)
		if got := hex.EncodeToString(sum[:]); got != c.SHA256 {
			t.Errorf("at %v the template gives SHA-256 %s, JAX's text has %s", c.Params, got, c.SHA256)
		}
		if !bytes.Contains(text, []byte("stable_mosaic_gpu.version")) {
			t.Errorf("at %v the text is not a serialized Mosaic GPU module", c.Params)
		}
	}
}

// TestMosaicTemplateRefuses: missing or non-positive parameters, numbers past int64, geometries below the
// checked ones and templates whose holes and formulas do not fit together are errors.
func TestMosaicTemplateRefuses(t *testing.T) {
	tmpl := draftTemplate(t)
	for _, params := range []map[string]int{{"H": 56, "T": 289}, {"H": 56, "T": 0, "K": 37}, {"H": 56, "T": 1 << 62, "K": 1 << 40}} {
		if _, err := tmpl.Instantiate(params); err == nil {
			t.Errorf("Instantiate(%v) gave no error", params)
		}
	}
	// Covered: no parameter below its least checked value (H 12, T 234, K 23 across the three checks).
	for params, covered := range map[[3]int]bool{{12, 234, 23}: true, {56, 624, 125}: true, {11, 289, 37}: false, {56, 233, 37}: false, {56, 289, 22}: false} {
		err := tmpl.Covers(map[string]int{"H": params[0], "T": params[1], "K": params[2]})
		if (err == nil) != covered {
			t.Errorf("Covers(H %d, T %d, K %d): %v, want covered %v", params[0], params[1], params[2], err, covered)
		}
	}
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	for name, bad := range map[string][]byte{
		"not gzip":      []byte("{}"),
		"pieces":        gz(`{"params": ["T"], "pieces": ["a"], "holes": [0], "formulas": [{"params": ["T"], "coef": 1, "add": 0, "div": 1}]}`),
		"hole":          gz(`{"params": ["T"], "pieces": ["a", "b"], "holes": [1], "formulas": [{"params": ["T"], "coef": 1, "add": 0, "div": 1}]}`),
		"divisor":       gz(`{"params": ["T"], "pieces": ["a", "b"], "holes": [0], "formulas": [{"params": ["T"], "coef": 1, "add": 0, "div": 0}]}`),
		"unknown param": gz(`{"params": ["T"], "pieces": ["a", "b"], "holes": [0], "formulas": [{"params": ["K"], "coef": 1, "add": 0, "div": 1}]}`),
	} {
		if _, err := xlaext.ParseMosaicTemplate(bad, nil); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
	// Floor division as the generator's (Python's //): (T - 3) / 2 at T = 2 is -1, not 0.
	tm, err := xlaext.ParseMosaicTemplate(gz(`{"params": ["T"], "pieces": ["<", ">"], "holes": [0], "formulas": [{"params": ["T"], "coef": 1, "add": -3, "div": 2}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if text, err := tm.Instantiate(map[string]int{"T": 2}); err != nil || !strings.Contains(string(text), "<-1>") {
		t.Errorf("floor((2 - 3) / 2): %q, %v; want <-1>", text, err)
	}
}

// TestMosaicTemplateOnGPU runs the draft fine stage's template instantiated at a geometry it was not made
// from (3 heads, 7 tiles of ragged valid rows, lists of 4) through MosaicGPUCall, and compares it with the
// block-sparse attention in float64: each query tile's rows attend to the valid rows of the key tiles
// its list names (bench/vsa_mosaic_draft.py's operands and result), within two bf16 steps at magnitude 1,
// as the Triton kernels' GPU tests allow against float32:
//
//	bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext
//	cd internal/xlaext && FASTVIDEO_GPU_TEST=1 ../../.gpu/xlaext.test -test.run TestMosaicTemplateOnGPU -test.v
func TestMosaicTemplateOnGPU(t *testing.T) {
	b := testutil.GPUBackend(t, "xla:cuda")
	tmpl := draftTemplate(t)
	const h, nt, k, tile, d = 3, 7, 4, 64, 128
	module, err := tmpl.Instantiate(map[string]int{"H": h, "T": nt, "K": k})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(31, 7))
	sizes := make([]int32, nt)
	for i := range sizes {
		sizes[i] = int32(1 + r.IntN(tile))
	}
	sizes[0] = tile
	s := nt * tile
	qkv := make([][]bfloat16.BFloat16, 3)
	for i := range qkv {
		qkv[i] = make([]bfloat16.BFloat16, h*s*d)
		for j := range qkv[i] {
			qkv[i][j] = bfloat16.FromFloat32(float32(r.NormFloat64()))
		}
	}
	idx, num, valid := make([]int32, h*nt*k), make([]int32, h*nt), make([]int32, h*nt*k)
	for row := range num {
		num[row] = k
		for j, key := range r.Perm(nt)[:k] {
			idx[row*k+j], valid[row*k+j] = int32(key), sizes[key]
		}
	}
	args := []any{tensors.FromFlatDataAndDimensions(qkv[0], h, s, d), tensors.FromFlatDataAndDimensions(qkv[1], h, s, d),
		tensors.FromFlatDataAndDimensions(qkv[2], h, s, d), tensors.FromFlatDataAndDimensions(idx, h, nt, k),
		tensors.FromFlatDataAndDimensions(num, h, nt), tensors.FromFlatDataAndDimensions(valid, h, nt, k)}
	exec, err := graph.NewExec(b, func(in []*graph.Node) *graph.Node {
		ops := make([]*graph.Node, len(in))
		for i, x := range in {
			ops[i] = graph.MulScalar(x, 1) // operands XLA made, not the parameters
		}
		out, err := xlaext.MosaicGPUCall(xlaext.MosaicGPUKernel{Name: "vsa_mosaic_draft", Module: module}, ops,
			[]shapes.Shape{shapes.Make(dtypes.BFloat16, h, s, d)})
		if err != nil {
			panic(err)
		}
		return graph.ConvertDType(out[0], dtypes.Float32)
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := exec.Call(args...)
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](res[0])
	want := make([]float32, len(got))
	at := func(x []bfloat16.BFloat16, head, row, c int) float64 { return float64(x[(head*s+row)*d+c].Float32()) }
	for head := range h {
		for qt := range nt {
			row := head*nt + qt
			var keys []int
			for j := range k {
				for c := range int(valid[row*k+j]) {
					keys = append(keys, int(idx[row*k+j])*tile+c)
				}
			}
			for qr := qt * tile; qr < (qt+1)*tile; qr++ {
				scores, top := make([]float64, len(keys)), math.Inf(-1)
				for i, key := range keys {
					for c := range d {
						scores[i] += at(qkv[0], head, qr, c) * at(qkv[1], head, key, c)
					}
					scores[i] /= math.Sqrt(d)
					top = math.Max(top, scores[i])
				}
				sum, out := 0.0, make([]float64, d)
				for i, key := range keys {
					p := math.Exp(scores[i] - top)
					sum += p
					for c := range d {
						out[c] += p * at(qkv[2], head, key, c)
					}
				}
				for c := range d {
					want[(head*s+qr)*d+c] = float32(out[c] / sum)
				}
			}
		}
	}
	if n := testutil.MaxBF16Steps(got, want); n > 2 {
		t.Errorf("against float64: %.3g bf16 steps (> 2), max abs diff %.3g", n, testutil.MaxAbsDiff(got, want))
	} else {
		t.Logf("against float64: %.3g bf16 steps, max abs diff %.3g", n, testutil.MaxAbsDiff(got, want))
	}
}
