package lora

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"fastvideo/internal/safetensors"
)

// Target names the checkpoint tensors one adapter module changes.
type Target struct {
	Weight string // the weight (a linear's [out, in], a norm's [n], a modulation table)
	Bias   string // the bias, "" when the module has none to change
	// Optional marks a layer only some variants of the model have (Wan's I2V image layers): when the
	// weights lack it, the module is skipped and listed in Touched.Skipped instead of failing.
	Optional bool
	// Rows, when set, spreads the module's low-rank product over row blocks of one or more weights
	// (Weight and Bias are then unused and must be ""): the adapter's model fuses projections the
	// checkpoint keeps apart (H3's attn.qkv_proj: to_q, to_k, to_v) or orders the rows of one
	// otherwise (H3's mlp.fc1, gate half first, against ff.net.0.proj, value half first). The blocks
	// must cover B·A's rows exactly once; only a plain low-rank pair (no bias or dense delta) splits.
	Rows []RowBlock
}

// RowBlock sends one block of a module's output rows to a block of a weight's rows. Blocks are equal
// parts, so that a map needs no sizes: rows [From·Out/Of, (From+1)·Out/Of) of B·A are added to rows
// [To·R/Into, (To+1)·R/Into) of Weight, whose row count is R.
type RowBlock struct {
	Weight   string
	From, Of int
	To, Into int
}

// rowSpan is a RowBlock resolved against the shapes: n rows of B·A from src added to the weight's rows
// from dst.
type rowSpan struct {
	weight      string
	src, dst, n int
}

// NameMap maps an adapter's normalized module names onto a model's checkpoint.
type NameMap struct {
	// Model names the model in messages ("the Wan DiT").
	Model string
	// Map returns the checkpoint tensors of one module, false when the model has no such module.
	Map func(module string, musubi bool) (Target, bool)
	// Hint, when set, explains unmatched modules (the file keys of the modules Map refused), e.g. "the keys
	// look like a MiniMax H3 adapter's: use one trained for the Wan DiT"; "" gives the generic advice.
	Hint func(unmatched []string) string
	// Check, when set, may refuse a module Map accepted, for what its name alone does not settle (H3:
	// native names under PEFT's adapter infix are DiffSynth-Studio files, whose fused QKV rows are
	// ordered per head); the error is returned as the adapter's.
	Check func(u *Update, t Target) error
}

// Weights are host float32 tensors merged in place.
type Weights interface {
	// Float32 returns a tensor's values (modified in place by a merge) and shape.
	Float32(name string) (data []float32, shape []int, ok bool)
}

// Tensor is one host float32 tensor.
type Tensor struct {
	Shape []int
	Data  []float32
}

// TensorMap is a Weights held in a map.
type TensorMap map[string]*Tensor

// Float32 implements Weights.
func (m TensorMap) Float32(name string) ([]float32, []int, bool) {
	t, ok := m[name]
	if !ok {
		return nil, nil, false
	}
	return t.Data, t.Shape, true
}

// Weighted is an adapter with the user's strength.
type Weighted struct {
	Adapter  *Adapter
	Strength float64
}

// Touched reports what one adapter changes.
type Touched struct {
	Adapter string
	Modules int      // adapter modules applied
	Tensors []string // checkpoint tensors changed, sorted
	// Skipped lists the modules mapped onto optional layers these weights lack (e.g. an I2V adapter's
	// image cross-attention on a T2V checkpoint), sorted.
	Skipped []string
}

// step is one resolved module: the update and its target tensors.
type step struct {
	u      *Update
	target Target
	skip   bool      // optional target absent from the weights
	rows   []rowSpan // Target.Rows resolved (nil without)
}

// Plan resolves every adapter against the model and the weights without changing anything: each module
// must map onto the model, its tensors must exist (an Optional target may be absent: it is skipped) and
// the shapes must agree. It reports the tensors each adapter would change and the modules it would skip.
func Plan(adapters []Weighted, names NameMap, w Weights) ([]Touched, error) {
	_, touched, err := plan(adapters, names, w)
	return touched, err
}

// Merge applies the adapters in order, in float32, after Plan has found no problem (so an error leaves
// the weights unchanged): W += strength·(alpha/r)·B·A and bias += strength·(alpha/r)·lora_B.bias for a
// low-rank pair, W += strength·diff and bias += strength·diff_b for dense deltas, W = set_weight for a
// replacement (any strength but 0, as ComfyUI's "set" patch). Strength 0 leaves the weights untouched;
// a zero product leaves a weight bit-identical (-0.0 included).
func Merge(adapters []Weighted, names NameMap, w Weights) ([]Touched, error) {
	steps, touched, err := plan(adapters, names, w)
	if err != nil {
		return nil, err
	}
	for i, ad := range adapters {
		if ad.Strength == 0 {
			continue // off: not even a set_weight applies
		}
		for _, s := range steps[i] {
			if s.skip {
				continue
			}
			if err := apply(s, ad.Strength, w); err != nil {
				return touched, fmt.Errorf("lora: adapter %s: %w (weights changed so far stay changed: reload the checkpoint)", ad.Adapter.Name, err)
			}
		}
	}
	return touched, nil
}

func plan(adapters []Weighted, names NameMap, w Weights) ([][]step, []Touched, error) {
	if names.Map == nil {
		return nil, nil, fmt.Errorf("lora: NameMap for %q has no Map function", names.Model)
	}
	steps := make([][]step, len(adapters))
	touched := make([]Touched, len(adapters))
	for i, ad := range adapters {
		if ad.Adapter == nil || ad.Adapter.file == nil || ad.Adapter.Updates == nil {
			return nil, nil, fmt.Errorf("lora: adapter %d is nil or closed", i)
		}
		if math.IsNaN(ad.Strength) || math.IsInf(ad.Strength, 0) {
			return nil, nil, fmt.Errorf("lora: adapter %s: strength %v must be a finite number (1 applies it as trained)", ad.Adapter.Name, ad.Strength)
		}
		s, err := resolve(ad.Adapter, names, w)
		if err != nil {
			return nil, nil, fmt.Errorf("lora: adapter %s: %w", ad.Adapter.Name, err)
		}
		steps[i] = s
		touched[i] = report(ad.Adapter.Name, s)
	}
	return steps, touched, nil
}

func report(name string, steps []step) Touched {
	set := map[string]bool{}
	var skipped []string
	for _, s := range steps {
		if s.skip {
			skipped = append(skipped, s.u.Module)
			continue
		}
		for _, r := range s.rows {
			set[r.weight] = true
		}
		if s.rows == nil && (s.u.HasLowRank() || s.u.HasDiff() || s.u.HasSet()) {
			set[s.target.Weight] = true
		}
		if s.u.HasBiasDelta() {
			set[s.target.Bias] = true
		}
	}
	t := Touched{Adapter: name, Modules: len(steps) - len(skipped), Skipped: skipped}
	for n := range set {
		t.Tensors = append(t.Tensors, n)
	}
	sort.Strings(t.Tensors)
	return t
}

// resolve maps every module of one adapter; unmatched modules are reported together.
func resolve(a *Adapter, names NameMap, w Weights) ([]step, error) {
	var steps []step
	var unmatched []string
	owner := map[string]*Update{} // target weight -> the module that changes it
	for _, u := range a.Updates {
		t, ok := names.Map(u.Module, u.Musubi)
		if !ok {
			unmatched = append(unmatched, u.Keys[0])
			continue
		}
		if names.Check != nil {
			if err := names.Check(u, t); err != nil {
				return nil, err
			}
		}
		targets := []string{t.Weight}
		if len(t.Rows) > 0 {
			targets = rowWeights(t.Rows)
		}
		for _, tw := range targets {
			if prev := owner[tw]; prev != nil && prev != u {
				return nil, fmt.Errorf("keys %q and %q both change %q (modules %q and %q): the file names one layer in two spellings (native and diffusers?); keep one", prev.Keys[0], u.Keys[0], tw, prev.Module, u.Module)
			}
			owner[tw] = u
		}
		if len(t.Rows) > 0 {
			rows, err := checkRows(u, t, w, names.Model)
			if err != nil {
				return nil, err
			}
			steps = append(steps, step{u: u, target: t, rows: rows})
			continue
		}
		if _, _, ok := w.Float32(t.Weight); !ok && t.Optional {
			steps = append(steps, step{u: u, target: t, skip: true})
			continue
		}
		if err := check(u, t, w, names.Model); err != nil {
			return nil, err
		}
		steps = append(steps, step{u: u, target: t})
	}
	if len(unmatched) > 0 {
		return nil, unmatchedError(unmatched, len(a.Updates), names)
	}
	return steps, nil
}

// rowWeights lists the weights of row blocks, each once, in order of appearance.
func rowWeights(blocks []RowBlock) []string {
	var out []string
	for _, b := range blocks {
		if !slices.Contains(out, b.Weight) {
			out = append(out, b.Weight)
		}
	}
	return out
}

// checkRows resolves a module's row blocks against the weights: a plain low-rank pair whose B·A rows the
// blocks cover exactly once, each block the same size as the weight rows it lands on, no weight row
// written twice.
func checkRows(u *Update, t Target, w Weights, model string) ([]rowSpan, error) {
	if t.Weight != "" || t.Bias != "" || t.Optional {
		return nil, fmt.Errorf("module %q: the name map gives both row blocks and a weight, bias or optional target (a bug in %s's map)", u.Module, model)
	}
	if !u.HasLowRank() || u.HasDiff() || u.HasSet() || u.HasBiasDelta() {
		return nil, fmt.Errorf("module %q (keys %s) is a fused projection that %s stores as separate or reordered rows; only a plain low-rank pair (lora_A/lora_B, no bias, diff or set_weight) can be split over them: re-export the adapter without the other parts", u.Module, strings.Join(quoteAll(u.Keys), ", "), model)
	}
	var spans []rowSpan
	for _, b := range t.Rows {
		_, shape, ok := w.Float32(b.Weight)
		if !ok {
			return nil, fmt.Errorf("module %q (key %q) maps rows to %q, which %s's weights lack: the adapter targets a layer this checkpoint does not have (made for another size or variant?)", u.Module, u.Keys[0], b.Weight, model)
		}
		if b.Of < 1 || b.From < 0 || b.From >= b.Of || b.Into < 1 || b.To < 0 || b.To >= b.Into {
			return nil, fmt.Errorf("module %q: row block %+v is malformed (a bug in %s's map)", u.Module, b, model)
		}
		if len(shape) != 2 || shape[1] != u.In || u.Out%b.Of != 0 || shape[0]%b.Into != 0 || u.Out/b.Of != shape[0]/b.Into {
			return nil, fmt.Errorf("module %q: B·A from %q is [%d, %d], whose part %d of %d does not fit part %d of %d of %q %v: the adapter was made for a model of another size", u.Module, u.b.Name, u.Out, u.In, b.From+1, b.Of, b.To+1, b.Into, b.Weight, shape)
		}
		n := u.Out / b.Of
		spans = append(spans, rowSpan{weight: b.Weight, src: b.From * n, dst: b.To * n, n: n})
	}
	if !tiles(spans, func(s rowSpan) int { return s.src }, u.Out) {
		return nil, fmt.Errorf("module %q: the row blocks of %s's map do not cover the %d rows of B·A exactly once (a bug in the map)", u.Module, model, u.Out)
	}
	for _, wn := range rowWeights(t.Rows) {
		var mine []rowSpan
		for _, s := range spans {
			if s.weight == wn {
				mine = append(mine, s)
			}
		}
		if !tiles(mine, func(s rowSpan) int { return s.dst }, -1) {
			return nil, fmt.Errorf("module %q: row blocks write rows of %q twice (a bug in %s's map)", u.Module, wn, model)
		}
	}
	return spans, nil
}

// tiles reports whether the spans, from start(s) for s.n rows, are disjoint and, when total >= 0,
// cover [0, total) exactly.
func tiles(spans []rowSpan, start func(rowSpan) int, total int) bool {
	s := slices.Clone(spans)
	sort.Slice(s, func(i, j int) bool { return start(s[i]) < start(s[j]) })
	end := 0
	for i, x := range s {
		if (total >= 0 && start(x) != end) || (i > 0 && start(x) < end) {
			return false
		}
		end = start(x) + x.n
	}
	return total < 0 || end == total
}

func unmatchedError(unmatched []string, total int, names NameMap) error {
	show := unmatched[:min(len(unmatched), 4)]
	msg := fmt.Sprintf("%d of %d modules have no counterpart in %s, e.g. %s", len(unmatched), total, names.Model, strings.Join(quoteAll(show), ", "))
	if names.Hint != nil {
		if hint := names.Hint(unmatched); hint != "" {
			return fmt.Errorf("%s: %s", msg, hint)
		}
	}
	return fmt.Errorf("%s: the adapter was trained for another model, or names modules this loader does not map; use an adapter for %s", msg, names.Model)
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// check verifies that the target tensors exist with the shapes the update needs.
func check(u *Update, t Target, w Weights, model string) error {
	_, shape, ok := w.Float32(t.Weight)
	if !ok && (u.HasLowRank() || u.HasDiff() || u.HasSet()) {
		return fmt.Errorf("module %q (key %q) maps to %q, which %s's weights lack: the adapter targets a layer this checkpoint does not have (made for another size or variant, e.g. 14B vs 1.3B blocks, I2V vs T2V?)", u.Module, u.Keys[0], t.Weight, model)
	}
	if u.HasLowRank() && !slices.Equal(shape, []int{u.Out, u.In}) {
		return fmt.Errorf("module %q: B·A from %q is [%d, %d] but %q is %v: the adapter was made for a model of another size", u.Module, u.b.Name, u.Out, u.In, t.Weight, shape)
	}
	for _, d := range []*safetensors.Info{u.diff, u.set} {
		if d != nil && !sameElements(d.Shape, shape) {
			return fmt.Errorf("module %q: %q is %v but %q is %v: the adapter was made for a model of another size", u.Module, d.Name, d.Shape, t.Weight, shape)
		}
	}
	if !u.HasBiasDelta() {
		return nil
	}
	if t.Bias == "" {
		return fmt.Errorf("module %q (key %q) changes a bias, but %s's %q has none", u.Module, u.Keys[0], model, t.Weight)
	}
	_, bshape, ok := w.Float32(t.Bias)
	if !ok {
		return fmt.Errorf("module %q changes bias %q, which %s's weights lack (a bias-free export?): load a checkpoint with biases", u.Module, t.Bias, model)
	}
	for _, b := range []*safetensors.Info{u.loraBias, u.diffBias} {
		if b != nil && !slices.Equal(b.Shape, bshape) {
			return fmt.Errorf("module %q: %q is %v but %q is %v: the adapter was made for a model of another size", u.Module, b.Name, b.Shape, t.Bias, bshape)
		}
	}
	return nil
}

// sameElements accepts a dense payload whose shape equals the weight's, or only differs by leading
// unit axes (a [1,6,D] modulation delta against a [6,D] table, or the reverse).
func sameElements(a, b []int) bool {
	trim := func(s []int) []int {
		for len(s) > 1 && s[0] == 1 {
			s = s[1:]
		}
		return s
	}
	return slices.Equal(trim(a), trim(b))
}

// apply merges one module.
func apply(s step, strength float64, w Weights) error {
	u := s.u
	if s.rows != nil {
		return applyRows(u, strength, s.rows, func(name string) []float32 {
			wd, _, _ := w.Float32(name)
			return wd
		})
	}
	wd, _, _ := w.Float32(s.target.Weight)
	if err := applyWeight(u, strength, wd); err != nil {
		return err
	}
	if u.HasBiasDelta() {
		bd, _, _ := w.Float32(s.target.Bias)
		return applyBias(u, strength, bd)
	}
	return nil
}

// applyWeight applies a module's weight changes (replacement, dense delta, low-rank product) to wd.
func applyWeight(u *Update, strength float64, wd []float32) error {
	if u.set != nil {
		v, err := u.set.Float32s()
		if err != nil {
			return err
		}
		copy(wd, v)
	}
	if u.diff != nil {
		if err := addScaled(wd, u.diff, strength); err != nil {
			return err
		}
	}
	if u.a != nil {
		if err := addLowRank(wd, u, float32(strength*u.Alpha/float64(u.Rank))); err != nil {
			return err
		}
	}
	return nil
}

// applyBias applies a module's bias deltas (lora_B.bias scaled like B·A, .diff_b by the strength) to bd.
func applyBias(u *Update, strength float64, bd []float32) error {
	if u.loraBias != nil {
		if err := addScaled(bd, u.loraBias, strength*u.Alpha/float64(u.Rank)); err != nil {
			return err
		}
	}
	if u.diffBias != nil {
		return addScaled(bd, u.diffBias, strength)
	}
	return nil
}

// addScaled adds scale·t to dst, leaving elements whose increment is ±0 untouched.
func addScaled(dst []float32, t *safetensors.Info, scale float64) error {
	v, err := t.Float32s()
	if err != nil {
		return err
	}
	s := float32(scale)
	for i, x := range v {
		if d := s * x; d != 0 {
			dst[i] += d
		}
	}
	return nil
}

// applyRows adds strength·(alpha/r)·B·A, row span by row span, to the weights data returns.
func applyRows(u *Update, strength float64, spans []rowSpan, data func(weight string) []float32) error {
	a, b, err := u.Factors()
	if err != nil {
		return err
	}
	scale := float32(strength * u.Alpha / float64(u.Rank))
	for _, s := range spans {
		addLowRankRows(data(s.weight), a, b, u.Rank, u.In, s.src, s.dst, s.n, scale)
	}
	return nil
}

// addLowRank adds scale·B·A to the [out, in] weight.
func addLowRank(wd []float32, u *Update, scale float32) error {
	a, b, err := u.Factors()
	if err != nil {
		return err
	}
	addLowRankRows(wd, a, b, u.Rank, u.In, 0, 0, u.Out, scale)
	return nil
}

// addLowRankRows adds scale·(B·A)[src+j] to row dst+j of the weight wd ([·, in]) for j < n, rows in
// parallel. Each row of the product is formed in float32 (the sum over the rank in order) before
// scaling, as ComfyUI's fp32 merge does.
func addLowRankRows(wd, a, b []float32, r, in, src, dst, n int, scale float32) {
	// One goroutine per 64K products at most: small modules (most of an adapter's) stay on this one.
	workers := max(1, min(runtime.GOMAXPROCS(0), n, n*in*r>>16))
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			row := make([]float32, in)
			for j := g; j < n; j += workers {
				o := src + j
				clear(row)
				for k := 0; k < r; k++ {
					c := b[o*r+k]
					if c == 0 {
						continue
					}
					ak := a[k*in : (k+1)*in]
					for i, x := range ak {
						row[i] += c * x
					}
				}
				d := wd[(dst+j)*in : (dst+j+1)*in]
				for i, x := range row {
					if v := scale * x; v != 0 {
						d[i] += v
					}
				}
			}
		}(g)
	}
	wg.Wait()
}
