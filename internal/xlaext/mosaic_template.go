package xlaext

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// MosaicTemplate is a Mosaic GPU kernel's module as MLIR text with a hole at every number that depends on
// the geometry (testdata/mosaic_template.py writes it). A Mosaic GPU module is compiled for one geometry:
// its memref types, launch grid and the constants derived from them are in the IR (a Triton kernel's IR
// reads its geometry from operands instead). Lowered at several geometries, a kernel's text keeps its
// structure and only those numbers change, each a formula of the geometry, so one template gives the
// module of any geometry; the plugin's handler parses text as well as bytecode (MosaicGPUKernel.Module).
type MosaicTemplate struct {
	// Params names the geometry's parameters the formulas read.
	Params []string `json:"params"`
	// Pieces are the text between the holes: the module is Pieces[0], then each hole's number and the
	// piece after it.
	Pieces []string `json:"pieces"`
	// Holes are each hole's formula, an index into Formulas.
	Holes    []int                 `json:"holes"`
	Formulas []MosaicFormula       `json:"formulas"`
	Checks   []MosaicTemplateCheck `json:"checks"`
}

// MosaicFormula is floor((Coef · the product of Params + Add) / Div).
type MosaicFormula struct {
	Params []string `json:"params"`
	Coef   int64    `json:"coef"`
	Add    int64    `json:"add"`
	Div    int64    `json:"div"`
}

// MosaicTemplateCheck is a geometry the template was made from and the SHA-256 (hex) of JAX's module text
// there, which the template must give back.
type MosaicTemplateCheck struct {
	Params map[string]int `json:"params"`
	SHA256 string         `json:"sha256"`
}

// ParseMosaicTemplate reads a template (gzipped JSON) and checks that its holes and formulas fit together.
// meta, when not nil, also receives the JSON (a kernel file's own keys beside the template's).
func ParseMosaicTemplate(gz []byte, meta any) (*MosaicTemplate, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("mosaic template: %w", err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("mosaic template: %w", err)
	}
	t := &MosaicTemplate{}
	for _, into := range []any{t, meta} {
		if into == nil {
			continue
		}
		if err := json.Unmarshal(data, into); err != nil {
			return nil, fmt.Errorf("mosaic template: %w", err)
		}
	}
	if len(t.Pieces) != len(t.Holes)+1 {
		return nil, fmt.Errorf("mosaic template: %d pieces around %d holes (want one more piece than holes)", len(t.Pieces), len(t.Holes))
	}
	for i, h := range t.Holes {
		if h < 0 || h >= len(t.Formulas) {
			return nil, fmt.Errorf("mosaic template: hole %d names formula %d of %d", i, h, len(t.Formulas))
		}
	}
	for i, f := range t.Formulas {
		if f.Div <= 0 || f.Coef == 0 {
			return nil, fmt.Errorf("mosaic template: formula %d divides by %d with coefficient %d", i, f.Div, f.Coef)
		}
		for _, p := range f.Params {
			if !slices.Contains(t.Params, p) {
				return nil, fmt.Errorf("mosaic template: formula %d reads %q, not one of the parameters %v", i, p, t.Params)
			}
		}
	}
	return t, nil
}

// Covers reports why params lie outside the geometries the template was checked at (nil: they do not): a
// parameter below its least checked value may lower to a module of another structure, which no formula
// describes. A template without checks covers nothing.
func (t *MosaicTemplate) Covers(params map[string]int) error {
	if len(t.Checks) == 0 {
		return fmt.Errorf("mosaic template: no geometry was checked")
	}
	for _, p := range t.Params {
		least := t.Checks[0].Params[p]
		for _, c := range t.Checks[1:] {
			least = min(least, c.Params[p])
		}
		if params[p] < least {
			return fmt.Errorf("mosaic template: %s = %d, below the %d it was checked at", p, params[p], least)
		}
	}
	return nil
}

// Instantiate is the module text at params (every parameter of the template, each at least 1). A number
// past int64 is an error, not a wrapped value.
func (t *MosaicTemplate) Instantiate(params map[string]int) ([]byte, error) {
	for _, p := range t.Params {
		if v, ok := params[p]; !ok || v < 1 {
			return nil, fmt.Errorf("mosaic template: parameter %s is %d (set: %v); every one of %v must be at least 1", p, v, ok, t.Params)
		}
	}
	values := make([]string, len(t.Formulas))
	for i, f := range t.Formulas {
		v, err := f.eval(params)
		if err != nil {
			return nil, err
		}
		values[i] = strconv.FormatInt(v, 10)
	}
	var out bytes.Buffer
	out.WriteString(t.Pieces[0])
	for i, h := range t.Holes {
		out.WriteString(values[h])
		out.WriteString(t.Pieces[i+1])
	}
	return out.Bytes(), nil
}

// eval is the formula at params, floor division as Python's //.
func (f MosaicFormula) eval(params map[string]int) (int64, error) {
	v := f.Coef
	for _, p := range f.Params {
		x := int64(params[p])
		if x != 0 && (v > math.MaxInt64/x || v < math.MinInt64/x) {
			return 0, fmt.Errorf("mosaic template: %v at %v overflows int64", f, params)
		}
		v *= x
	}
	if (f.Add > 0 && v > math.MaxInt64-f.Add) || (f.Add < 0 && v < math.MinInt64-f.Add) {
		return 0, fmt.Errorf("mosaic template: %v at %v overflows int64", f, params)
	}
	v += f.Add
	q := v / f.Div
	if v%f.Div != 0 && v < 0 {
		q--
	}
	return q, nil
}
