package lora

import (
	"fmt"
	"maps"
	"slices"
)

// Shapes is a Weights that knows only shapes (a model's parameter table, a checkpoint's headers): Plan
// runs against it; Merge cannot (it has no values).
type Shapes map[string][]int

// Float32 implements Weights with no data.
func (s Shapes) Float32(name string) ([]float32, []int, bool) {
	shape, ok := s[name]
	return nil, shape, ok
}

// Merger applies planned adapters one tensor at a time, so that a loader can merge each weight as it
// reads it (host memory: one tensor) instead of holding the whole model in float32. Its arithmetic is
// Merge's, tensor by tensor: the adapters in order, each module's weight and bias changes.
type Merger struct {
	adapters []Weighted
	touched  []Touched
	// byTensor lists, for every tensor some adapter changes, the steps that change it in adapter order.
	byTensor map[string][]tensorStep
}

type tensorStep struct {
	s        step
	strength float64
	bias     bool      // the step's bias changes this tensor (else its weight)
	rows     []rowSpan // the step's row spans into this tensor (a Target.Rows module)
}

// NewMerger plans the adapters against w (Shapes is enough) and returns the merger with what each
// adapter touches; an error changes nothing and names the adapter, key and fix as Plan's do.
func NewMerger(adapters []Weighted, names NameMap, w Weights) (*Merger, error) {
	steps, touched, err := plan(adapters, names, w)
	if err != nil {
		return nil, err
	}
	m := &Merger{adapters: adapters, touched: touched, byTensor: map[string][]tensorStep{}}
	for i, ad := range adapters {
		if ad.Strength == 0 {
			continue // off: not even a set_weight applies (Merge's rule)
		}
		for _, s := range steps[i] {
			if s.skip {
				continue
			}
			u := s.u
			if s.rows != nil {
				for _, r := range s.rows {
					ts := m.byTensor[r.weight]
					if n := len(ts); n > 0 && ts[n-1].s.u == u && ts[n-1].rows != nil {
						ts[n-1].rows = append(ts[n-1].rows, r)
						continue
					}
					m.byTensor[r.weight] = append(ts, tensorStep{s: s, strength: ad.Strength, rows: []rowSpan{r}})
				}
				continue
			}
			if u.HasLowRank() || u.HasDiff() || u.HasSet() {
				m.byTensor[s.target.Weight] = append(m.byTensor[s.target.Weight], tensorStep{s: s, strength: ad.Strength})
			}
			if u.HasBiasDelta() {
				m.byTensor[s.target.Bias] = append(m.byTensor[s.target.Bias], tensorStep{s: s, strength: ad.Strength, bias: true})
			}
		}
	}
	return m, nil
}

// Touched reports what each adapter changes (Plan's report).
func (m *Merger) Touched() []Touched { return m.touched }

// Tensors lists the tensors the merge changes, sorted.
func (m *Merger) Tensors() []string { return slices.Sorted(maps.Keys(m.byTensor)) }

// Changes reports whether the merge changes tensor name.
func (m *Merger) Changes(name string) bool { return len(m.byTensor[name]) > 0 }

// Apply merges every adapter's change of tensor name into data (its float32 values, in place; the
// shape Plan checked). A tensor no adapter changes is left as it is.
func (m *Merger) Apply(name string, data []float32) error {
	for _, ts := range m.byTensor[name] {
		var err error
		switch {
		case ts.rows != nil:
			err = applyRows(ts.s.u, ts.strength, ts.rows, func(string) []float32 { return data })
		case ts.bias:
			err = applyBias(ts.s.u, ts.strength, data)
		default:
			err = applyWeight(ts.s.u, ts.strength, data)
		}
		if err != nil {
			return fmt.Errorf("lora: merging %s: %w", name, err)
		}
	}
	return nil
}
