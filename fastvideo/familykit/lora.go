package familykit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/fastvideo/api"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/lora"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// LoRA is a generator's opened adapters (family.Engine.LoRA), validated against the DiT's weights: the
// files stay mapped until Close, and LoadMerged merges them into every DiT the generator loads.
type LoRA struct {
	Names    lora.NameMap
	Adapters []lora.Weighted
	// Plan is what each adapter changes, for the plans.
	Plan []api.PlanLoRA
}

// loraError is invalid input naming the adapter file.
func loraError(path string, err error, names lora.NameMap) error {
	return &api.RequestError{Field: "lora", Value: path, Allowed: fmt.Sprintf(
		"a LoRA adapter (safetensors) for %s: %v", names.Model, err)}
}

// OpenLoRA opens every adapter and plans them, in order, against shapes (the DiT checkpoint's tensor
// names and shapes, from its headers or the model's parameter table): a missing file, a file that is no
// adapter, keys the model does not have (another model's adapter), shapes of another size, NaN/Inf values
// and absurd ranks are a *family.RequestError for "lora" naming the file, before anything loads. No
// adapters: nil, nil.
func OpenLoRA(specs []api.LoRA, names lora.NameMap, shapes lora.Shapes) (*LoRA, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	l := &LoRA{Names: names}
	for _, s := range specs {
		if math.IsNaN(s.Strength) || math.IsInf(s.Strength, 0) {
			l.Close()
			return nil, &api.RequestError{Field: "lora", Value: fmt.Sprintf("%s:%v", s.Path, s.Strength),
				Allowed: "a finite strength (1 applies the adapter as trained, 0 turns it off)"}
		}
		a, err := lora.Open(s.Path)
		if err != nil {
			l.Close()
			return nil, loraError(s.Path, err, names)
		}
		l.Adapters = append(l.Adapters, lora.Weighted{Adapter: a, Strength: s.Strength})
	}
	m, err := lora.NewMerger(l.Adapters, names, shapes)
	if err != nil {
		l.Close()
		return nil, loraError(adapterOf(err, specs), err, names)
	}
	for i, t := range m.Touched() {
		l.Plan = append(l.Plan, api.PlanLoRA{Path: specs[i].Path, Strength: specs[i].Strength, Modules: t.Modules,
			Tensors: len(t.Tensors), Skipped: t.Skipped})
	}
	return l, nil
}

// adapterOf names the adapter a plan error is about (lora's messages start with it), else all of them.
func adapterOf(err error, specs []api.LoRA) string {
	for _, s := range specs {
		if strings.Contains(err.Error(), "adapter "+s.Path+":") {
			return s.Path
		}
	}
	if len(specs) == 1 {
		return specs[0].Path
	}
	paths := make([]string, len(specs))
	for i, s := range specs {
		paths[i] = s.Path
	}
	return strings.Join(paths, ", ")
}

// PlanLoRA opens, validates and closes the adapters: what a plan lists without a generator.
func PlanLoRA(specs []api.LoRA, names lora.NameMap, shapes lora.Shapes) ([]api.PlanLoRA, error) {
	l, err := OpenLoRA(specs, names, shapes)
	if err != nil || l == nil {
		return nil, err
	}
	defer l.Close()
	return l.Plan, nil
}

// Close unmaps the adapter files (nil-safe).
func (l *LoRA) Close() error {
	if l == nil {
		return nil
	}
	var errs []error
	for _, a := range l.Adapters {
		errs = append(errs, a.Adapter.Close())
	}
	l.Adapters = nil
	return errors.Join(errs...)
}

// ShapesOf is a parameter table as lora.Shapes.
func ShapesOf(table weights.Shapes) lora.Shapes {
	out := lora.Shapes{}
	for _, t := range table {
		out[t.Name] = t.Shape
	}
	return out
}

// CheckpointShapes are the tensor names and shapes of the checkpoint in dir, from its headers.
func CheckpointShapes(dir string) (lora.Shapes, error) {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	return SourceShapes(ck), nil
}

// SourceShapes are a source's tensor names and shapes (headers where the source computes its tensors).
func SourceShapes(src weights.Source) lora.Shapes {
	out := lora.Shapes{}
	for _, n := range src.Names() {
		if h, ok := weights.HeaderOf(src, n); ok {
			out[n] = h.Shape
		}
	}
	return out
}

// LoadMerged builds a DiT on base with the adapters merged into base's bytes as they are read (l nil: on
// base as it is), for a loader that cuts weights from the checkpoint without binding them whole
// (tensor-parallel H3 shards), where MergeOnBind's hook never sees the whole tensor: every tensor an
// adapter changes is decoded to float32 on the host, merged (lora.Merger: the adapters in order) and
// encoded back to the dtype base stores it in, one tensor at a time as the loader reads it; the rest are
// copied as they are, so that the model owns every byte and base may close when build returns (the
// pure-Go backend may otherwise alias a checkpoint's mapping). The plan is checked again against base's
// own headers first.
func LoadMerged[T any](l *LoRA, base weights.Source, build func(weights.Source) (T, error)) (T, error) {
	if l == nil {
		return build(base)
	}
	var zero T
	m, err := lora.NewMerger(l.Adapters, l.Names, SourceShapes(base))
	if err != nil {
		return zero, fmt.Errorf("fastvideo: merging LoRA adapters: %w", err)
	}
	src := &mergedSource{base: base, m: m}
	out, err := build(src)
	if src.err != nil { // the bind reports a tensor it could not read as missing: say why
		return zero, src.err
	}
	return out, err
}

// mergedSource is base with the merged tensors (a weights.HeaderSource: Bind asks for each tensor as it
// loads it, so only one merged tensor is alive at a time).
type mergedSource struct {
	base weights.Source
	m    *lora.Merger
	err  error
}

func (s *mergedSource) Names() []string { return s.base.Names() }

func (s *mergedSource) Header(name string) (safetensors.Info, bool) {
	h, ok := weights.HeaderOf(s.base, name)
	if ok && s.m.Changes(name) {
		h.Data = nil
	}
	return h, ok
}

func (s *mergedSource) Tensor(name string) (safetensors.Info, bool) {
	info, ok := s.base.Tensor(name)
	if !ok {
		return info, ok
	}
	if !s.m.Changes(name) {
		info.Data = slices.Clone(info.Data)
		return info, true
	}
	merged, err := mergeTensor(info, s.m)
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return safetensors.Info{}, false
	}
	return merged, true
}

// mergeTensor decodes info to float32, merges and encodes the result in info's dtype.
func mergeTensor(info safetensors.Info, m *lora.Merger) (safetensors.Info, error) {
	if !info.DType.IsFloat() {
		return info, fmt.Errorf("fastvideo: LoRA: %s is stored as %s, not a float: a quantized checkpoint takes no adapter; load the dense (released) weights", info.Name, info.DType)
	}
	vals, err := info.Float32s()
	if err != nil {
		return info, fmt.Errorf("fastvideo: LoRA: reading %s: %w", info.Name, err)
	}
	if err := m.Apply(info.Name, vals); err != nil {
		return info, fmt.Errorf("fastvideo: %w", err)
	}
	out := info
	if out.Data, err = safetensors.FloatBytes(vals, info.DType); err != nil {
		return info, fmt.Errorf("fastvideo: LoRA: %s: %w", info.Name, err)
	}
	return out, nil
}

// MergeOnBind is how adapters reach a DiT's weights: the returned hook, the DiT's Options.OnBind, merges
// them into each weight they change as it lands on the device (read from a checkpoint, or drawn there
// for random weights), before the model converts or caches anything from it (FP8 codes, the AdaLN step
// cache). A weight changed only by low-rank pairs (every adapter layout but dense deltas and
// replacements) is merged on its device, a matrix product per adapter in float32 (at release size about
// 8 TFLOP for LightX2V's H3 adapter: minutes on a host's cores, milliseconds on a GPU); the rest is read
// back and merged on the host (lora.Merger.Apply). Either way the result goes back in the weight's
// dtype, and a zero product leaves a value bit-identical. shapes gives the DiT's tensor shapes (the
// checkpoint's headers or the parameter table); done frees the merge programs once the DiT is built.
// l nil: no hook.
func (l *LoRA) MergeOnBind(shapes func() (lora.Shapes, error)) (hook func(*weights.Param) error, done func(), err error) {
	if l == nil {
		return nil, func() {}, nil
	}
	table, err := shapes()
	if err != nil {
		return nil, nil, err
	}
	m, err := lora.NewMerger(l.Adapters, l.Names, table)
	if err != nil {
		return nil, nil, fmt.Errorf("fastvideo: merging LoRA adapters: %w", err)
	}
	dm := &deviceMerge{m: m, execs: map[string]*Exec{}}
	return func(p *weights.Param) error {
		if !m.Changes(p.Name) {
			return nil
		}
		merged, err := dm.merge(p.Name, p.T)
		if err != nil {
			return err
		}
		p.T.FinalizeAll()
		p.T = merged
		return nil
	}, dm.close, nil
}

// BuildMerged builds a DiT (build, handed its Options.OnBind) with the adapters merged into its weights as
// they land (MergeOnBind), and frees the merge programs once it is built. l nil: build(nil).
func BuildMerged[T any](l *LoRA, shapes func() (lora.Shapes, error), build func(onBind func(*weights.Param) error) (T, error)) (T, error) {
	hook, done, err := l.MergeOnBind(shapes)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	return build(hook)
}

// deviceMerge merges adapters into tensors on their devices, one program per dtype, shape and ranks.
type deviceMerge struct {
	m     *lora.Merger
	execs map[string]*Exec
}

func (dm *deviceMerge) close() {
	for _, e := range dm.execs {
		e.Finalize()
	}
	dm.execs = nil
}

// merge returns t (a float tensor on a device) with the adapters merged, on the same device in the same
// dtype.
func (dm *deviceMerge) merge(name string, t *tensors.Tensor) (*tensors.Tensor, error) {
	if d := t.Shape().Dimensions; len(d) == 2 {
		terms, ok, err := dm.m.LowRankTerms(name, d[0], d[1])
		if err != nil {
			return nil, fmt.Errorf("fastvideo: LoRA: %s: %w", name, err)
		}
		if ok {
			return dm.lowRank(name, t, terms)
		}
	}
	return mergeOnHost(name, t, dm.m)
}

// lowRank adds every term's Scale·(B·A) to t in float32 on t's device, leaving the values a term's
// product is ±0 at as they are (lora.Merger.Apply's rule, which keeps -0.0).
func (dm *deviceMerge) lowRank(name string, t *tensors.Tensor, terms []lora.LowRankTerm) (*tensors.Tensor, error) {
	key := fmt.Sprint(t.DType(), t.Shape().Dimensions)
	args := []any{t}
	for _, term := range terms {
		key += fmt.Sprint(",", term.Rank)
		args = append(args, tensors.FromFlatDataAndDimensions(term.A, term.Rank, term.In),
			tensors.FromFlatDataAndDimensions(term.B, term.Out, term.Rank), tensors.FromScalar(term.Scale))
	}
	backend, dev, err := placeOf(name, t)
	if err != nil {
		return nil, err
	}
	e := dm.execs[key]
	if e == nil {
		if err := graphexec.Catch("fastvideo: LoRA", func() error {
			e = graphexec.MustExec(backend, "fastvideo.lora_merge", lowRankGraph)
			return nil
		}); err != nil {
			return nil, err
		}
		dm.execs[key] = e
	}
	out, err := graphexec.CallOn(e, dev, args...)
	for _, a := range args[1:] {
		a.(*tensors.Tensor).FinalizeAll()
	}
	if err != nil {
		return nil, fmt.Errorf("fastvideo: LoRA: merging %s: %w", name, err)
	}
	return out[0], nil
}

// placeOf is the backend and device weight name's tensor t lives on.
func placeOf(name string, t *tensors.Tensor) (compute.Backend, compute.DeviceNum, error) {
	backend, dev, err := graphexec.Place(t)
	if err != nil {
		return nil, 0, fmt.Errorf("fastvideo: LoRA: %s: %w", name, err)
	}
	return backend, dev, nil
}

// lowRankGraph is W (any float dtype) plus, for each (A [r, in], B [out, r], scale) after it,
// scale·(B·A) where that is not zero, in float32, back in W's dtype.
func lowRankGraph(in []*Node) []*Node {
	w := in[0]
	acc := ConvertDType(w, dtypes.Float32)
	for i := 1; i+2 < len(in); i += 3 {
		d := Mul(MatMul(in[i+1], in[i]), in[i+2])
		acc = Where(Equal(d, ZerosLike(d)), acc, Add(acc, d))
	}
	return []*Node{ConvertDType(acc, w.DType())}
}

// mergeOnHost is t with the adapters merged on the host (lora.Merger.Apply), back on t's device in its
// dtype (rounded to nearest even, as LoadMerged encodes).
func mergeOnHost(name string, t *tensors.Tensor, m *lora.Merger) (*tensors.Tensor, error) {
	vals, err := graphexec.HostF32(t)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: LoRA: reading %s: %w", name, err)
	}
	if err := m.Apply(name, vals); err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	backend, dev, err := placeOf(name, t)
	if err != nil {
		return nil, err
	}
	data, err := safetensors.FloatBytes(vals, safetensors.F32)
	if err != nil {
		return nil, err
	}
	info := safetensors.Info{Name: name, DType: safetensors.F32, Shape: t.Shape().Dimensions, Data: data}
	out, err := weights.LoadTo(info, t.DType(), backend, dev)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: LoRA: %s: %w", name, err)
	}
	return out, nil
}

// OpenAdapters opens and validates a generator's adapters against the DiT's tensor shapes (read only
// when there are adapters); nil without adapters.
func OpenAdapters(specs []api.LoRA, names lora.NameMap, shapes func() (lora.Shapes, error)) (*LoRA, error) {
	return withAdapters(specs, names, shapes, OpenLoRA)
}

// PlanAdapters validates adapters against the DiT's tensor shapes and reports what each changes
// (nil without adapters).
func PlanAdapters(specs []api.LoRA, names lora.NameMap, shapes func() (lora.Shapes, error)) ([]api.PlanLoRA, error) {
	return withAdapters(specs, names, shapes, PlanLoRA)
}

// withAdapters runs use on the adapters and the DiT's shapes, which it reads only when there are
// adapters (the zero T without).
func withAdapters[T any](specs []api.LoRA, names lora.NameMap, shapes func() (lora.Shapes, error),
	use func([]api.LoRA, lora.NameMap, lora.Shapes) (T, error)) (T, error) {
	var none T
	if len(specs) == 0 {
		return none, nil
	}
	s, err := shapes()
	if err != nil {
		return none, err
	}
	return use(specs, names, s)
}
