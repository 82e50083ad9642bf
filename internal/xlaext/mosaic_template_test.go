package xlaext_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

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

// TestMosaicTemplateGivesJAXText: at every geometry it was made from, the template gives JAX's module text
// back byte for byte (its SHA-256 as the template records it).
func TestMosaicTemplateGivesJAXText(t *testing.T) {
	data, err := os.ReadFile(mosaicDraftTemplate)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := xlaext.ParseMosaicTemplate(data)
	if err != nil {
		t.Fatal(err)
	}
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

// TestMosaicTemplateRefuses: missing or non-positive parameters, numbers past int64, and templates whose
// holes and formulas do not fit together are errors.
func TestMosaicTemplateRefuses(t *testing.T) {
	data, err := os.ReadFile(mosaicDraftTemplate)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := xlaext.ParseMosaicTemplate(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, params := range []map[string]int{{"H": 56, "T": 289}, {"H": 56, "T": 0, "K": 37}, {"H": 56, "T": 1 << 62, "K": 1 << 40}} {
		if _, err := tmpl.Instantiate(params); err == nil {
			t.Errorf("Instantiate(%v) gave no error", params)
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
		if _, err := xlaext.ParseMosaicTemplate(bad); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
	// Floor division as the generator's (Python's //): (T - 3) / 2 at T = 2 is -1, not 0.
	tm, err := xlaext.ParseMosaicTemplate(gz(`{"params": ["T"], "pieces": ["<", ">"], "holes": [0], "formulas": [{"params": ["T"], "coef": 1, "add": -3, "div": 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if text, err := tm.Instantiate(map[string]int{"T": 2}); err != nil || !strings.Contains(string(text), "<-1>") {
		t.Errorf("floor((2 - 3) / 2): %q, %v; want <-1>", text, err)
	}
}
