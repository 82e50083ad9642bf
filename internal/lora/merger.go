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

// LowRankTerm is one low-rank step of a tensor's merge: Scale·(B·A) added to the [Out, In] tensor, B
// laid out on the tensor's rows ([Out, Rank]; zero on rows a fused module's step does not reach).
type LowRankTerm struct {
	A, B          []float32
	Rank, In, Out int
	Scale         float32
}

// LowRankTerms is Apply's work on the [out, in] tensor name as low-rank terms in adapter order, when
// that is all of it, so that a device can form the products (a matrix product per term where Apply
// loops on the host). ok is false when a step replaces the tensor, adds a dense delta or is a bias
// change: Apply then. The sum differs from Apply's only by float32 rounding order.
func (m *Merger) LowRankTerms(name string, out, in int) (terms []LowRankTerm, ok bool, err error) {
	for _, ts := range m.byTensor[name] {
		u := ts.s.u
		if ts.bias || u.set != nil || u.diff != nil || u.a == nil || u.In != in {
			return nil, false, nil
		}
		a, b, err := u.Factors()
		if err != nil {
			return nil, false, err
		}
		term := LowRankTerm{A: a, B: b, Rank: u.Rank, In: in, Out: out, Scale: float32(ts.strength * u.Alpha / float64(u.Rank))}
		switch {
		case ts.rows != nil:
			term.B = make([]float32, out*u.Rank)
			for _, s := range ts.rows {
				copy(term.B[s.dst*u.Rank:(s.dst+s.n)*u.Rank], b[s.src*u.Rank:(s.src+s.n)*u.Rank])
			}
		case u.Out != out:
			return nil, false, nil
		}
		terms = append(terms, term)
	}
	return terms, len(terms) > 0, nil
}
