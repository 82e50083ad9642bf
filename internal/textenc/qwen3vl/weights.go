package qwen3vl

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/blockfp8"
	"fastvideo/internal/embedrows"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Weights supplies the tensors of one forward pass. Implementations decide what
// stays resident: the Encoder asks for one layer at a time and calls the returned
// release function as soon as that layer has run.
type Weights interface {
	// Embed returns the embedding rows of ids, [len(ids), hidden], on the device
	// in the compute dtype. The caller owns (and frees) the tensor.
	Embed(ids []int) (*tensors.Tensor, error)
	// Layer returns decoder layer i's tensors in LayerTensorNames order.
	Layer(i int) (ws []*tensors.Tensor, release func(), err error)
	// FinalNorm returns the final RMSNorm weight (model.norm).
	FinalNorm() (w *tensors.Tensor, release func(), err error)
	// Close frees whatever is still resident.
	Close() error
}

// CheckpointWeights reads the text decoder from a safetensors source (a file,
// a sharded checkpoint or a fixture), either streamed layer by layer or with
// every needed tensor resident on the device.
type CheckpointWeights struct {
	cfg       Config
	src       weights.Source
	backend   compute.Backend
	prefix    string
	dtype     dtypes.DType
	numLayers int
	finalNorm bool
	resident  bool

	// Resident mode only.
	layers []*weights.Set
	table  *weights.Set
	norm   *weights.Set
	gather *Exec
}

func nop() {}

// LoadWeights checks that src holds every tensor the configured forward pass
// needs (embedding, layers 0..index-1, and model.norm when opts.FinalNorm), with
// the expected shapes, and reports every problem at once. In resident mode it
// then uploads them all; in streamed mode it uploads nothing yet.
func LoadWeights(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*CheckpointWeights, error) {
	opts = opts.withDefaults()
	var err error
	if opts.DType, err = modelkit.Prepare("qwen3vl", cfg, backend, opts.DType, modelkit.HalfDTypes); err != nil {
		return nil, err
	}
	index, err := opts.ResolveHiddenState(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.BlockFP8.Enabled() {
		if src, err = blockFP8Source(src, cfg, opts.Prefix, index); err != nil {
			return nil, err
		}
	}
	w := &CheckpointWeights{
		cfg: cfg, src: src, backend: backend, prefix: opts.Prefix, dtype: opts.DType,
		numLayers: index, finalNorm: opts.FinalNorm, resident: opts.Resident,
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	if !opts.Resident {
		return w, nil
	}
	if err := w.loadResident(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// quantizedLinears are the LayerTensorNames upstream stores in block FP8: every linear of a
// decoder layer (MiniMaxH3SerializedFP8Config.get_quant_method quantizes each LinearBase under
// ".language_model.layers.", fastvideo/models/encoders/minimax_h3_checkpoint_fp8.py).
var quantizedLinears = []string{
	"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
	"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
}

// blockFP8Source wraps a block-FP8 checkpoint so that its weights bind as dense ones, after checking
// that every linear of the layers the forward reads is FP8: upstream refuses partially quantized
// language stacks, and a dense weight there would mean the checkpoint and its config disagree.
func blockFP8Source(src weights.Source, cfg Config, prefix string, layers int) (weights.Source, error) {
	q, err := blockfp8.Wrap(src, cfg.BlockFP8)
	if err != nil {
		return nil, fmt.Errorf("qwen3vl: %w", err)
	}
	var dense []string
	for i := 0; i < layers; i++ {
		for _, n := range quantizedLinears {
			name := fmt.Sprintf("%slayers.%d.%s", prefix, i, n)
			if _, ok := src.Tensor(name); ok && !q.Quantized(name) {
				dense = append(dense, name)
			}
		}
	}
	if len(dense) > 0 {
		return nil, fmt.Errorf("qwen3vl: %w: quantization_config declares block FP8 but %d decoder linears are not F8_E4M3 (first: %s); partially quantized language stacks are not supported",
			blockfp8.ErrConfig, len(dense), dense[0])
	}
	return q, nil
}

func (w *CheckpointWeights) embedName() string { return w.prefix + "embed_tokens.weight" }
func (w *CheckpointWeights) normName() string  { return w.prefix + "norm.weight" }
func (w *CheckpointWeights) layerPrefix(i int) string {
	return fmt.Sprintf("%slayers.%d", w.prefix, i)
}

// check validates names, shapes and dtypes from the headers alone, so that a
// wrong checkpoint fails before any layer is computed.
func (w *CheckpointWeights) check() error {
	type want struct {
		name  string
		shape []int
	}
	wants := []want{{w.embedName(), []int{w.cfg.VocabSize, w.cfg.HiddenSize}}}
	shapesOf := LayerTensorShapes(w.cfg)
	for i := 0; i < w.numLayers; i++ {
		for k, n := range LayerTensorNames {
			wants = append(wants, want{w.layerPrefix(i) + "." + n, shapesOf[k]})
		}
	}
	if w.finalNorm {
		wants = append(wants, want{w.normName(), []int{w.cfg.HiddenSize}})
	}
	var problems []string
	for _, x := range wants {
		info, ok := weights.HeaderOf(w.src, x.name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing: %s %v", x.name, x.shape))
		case !slices.Equal(info.Shape, x.shape):
			problems = append(problems, fmt.Sprintf("mismatched: %s: checkpoint shape %v, config expects %v", x.name, info.Shape, x.shape))
		case info.DType == safetensors.F8E4M3:
			problems = append(problems, fmt.Sprintf("mismatched: %s: checkpoint dtype F8_E4M3 needs its block scales, but config.json declares no block-FP8 quantization_config", x.name))
		case !info.DType.IsFloat():
			problems = append(problems, fmt.Sprintf("mismatched: %s: checkpoint dtype %s is not a float type", x.name, info.DType))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	hint := ""
	if _, ok := weights.HeaderOf(w.src, w.embedName()); !ok {
		hint = fmt.Sprintf(" (no %q: is the tensor-name prefix %q right? released Qwen3-VL checkpoints use %q)", w.embedName(), w.prefix, DefaultPrefix)
	}
	sort.Strings(problems)
	return fmt.Errorf("qwen3vl: checkpoint does not match the config%s:\n  %s", hint, strings.Join(problems, "\n  "))
}

func (w *CheckpointWeights) layerSet(i int) *weights.Set {
	set := weights.NewSet(w.layerPrefix(i) + ".")
	for k, n := range LayerTensorNames {
		set.Add(n, LayerTensorShapes(w.cfg)[k]...)
	}
	return set
}

func (w *CheckpointWeights) bind(set *weights.Set) error {
	return weights.Bind(w.src, set, weights.Options{DType: w.dtype, Backend: w.backend, AllowUnexpected: true})
}

func (w *CheckpointWeights) loadResident() error {
	w.table = weights.NewSet("")
	w.table.Add(w.embedName(), w.cfg.VocabSize, w.cfg.HiddenSize)
	if err := w.bind(w.table); err != nil {
		return err
	}
	for i := 0; i < w.numLayers; i++ {
		set := w.layerSet(i)
		if err := w.bind(set); err != nil {
			return err
		}
		w.layers = append(w.layers, set)
	}
	if w.finalNorm {
		w.norm = weights.NewSet("")
		w.norm.Add(w.normName(), w.cfg.HiddenSize)
		if err := w.bind(w.norm); err != nil {
			return err
		}
	}
	var err error
	w.gather, err = NewExec(w.backend, func(table, ids *Node) *Node {
		return Gather(table, ExpandAxes(ids, -1))
	})
	return err
}

// Embed implements Weights. Streamed, it reads only the rows of ids from the
// table's bytes; resident, it gathers them on the device. Both convert the stored
// values to the compute dtype with the same host rounding (weights.Load), so the
// two modes hand the first layer bit-identical inputs.
func (w *CheckpointWeights) Embed(ids []int) (*tensors.Tensor, error) {
	if w.resident {
		if err := embedrows.CheckTokenIDs(ids, w.cfg.VocabSize); err != nil {
			return nil, fmt.Errorf("qwen3vl: %w", err)
		}
		idx := make([]int32, len(ids))
		for i, id := range ids {
			idx[i] = int32(id)
		}
		idsT := tensors.FromFlatDataAndDimensions(idx, len(idx))
		defer idsT.FinalizeAll()
		return graphexec.Call1(w.gather, w.table.Params()[0].T, idsT)
	}
	table, ok := w.src.Tensor(w.embedName())
	if !ok {
		return nil, fmt.Errorf("qwen3vl: checkpoint has no %q", w.embedName())
	}
	t, err := embedrows.LoadRows(table, ids, w.dtype, w.backend)
	if err != nil {
		return nil, fmt.Errorf("qwen3vl: %w", err)
	}
	return t, nil
}

// Layer implements Weights.
func (w *CheckpointWeights) Layer(i int) ([]*tensors.Tensor, func(), error) {
	if i < 0 || i >= w.numLayers {
		return nil, nil, fmt.Errorf("qwen3vl: layer %d requested but only layers 0..%d were configured (hidden-state index %d)", i, w.numLayers-1, w.numLayers)
	}
	release := nop
	var s *weights.Set
	if w.resident {
		s = w.layers[i]
	} else {
		s = w.layerSet(i)
		if err := w.bind(s); err != nil {
			return nil, nil, err
		}
		release = s.Release
	}
	params := s.Params()
	out := make([]*tensors.Tensor, len(params))
	for k, p := range params {
		out[k] = p.T
	}
	return out, release, nil
}

// FinalNorm implements Weights.
func (w *CheckpointWeights) FinalNorm() (*tensors.Tensor, func(), error) {
	if w.resident {
		if w.norm == nil {
			return nil, nil, fmt.Errorf("qwen3vl: final norm requested but the weights were loaded without Options.FinalNorm")
		}
		return w.norm.Params()[0].T, nop, nil
	}
	s := weights.NewSet("")
	s.Add(w.normName(), w.cfg.HiddenSize)
	if err := w.bind(s); err != nil {
		return nil, nil, err
	}
	return s.Params()[0].T, s.Release, nil
}

// Close implements Weights: it frees the resident tensors (the source stays open).
func (w *CheckpointWeights) Close() error {
	for _, s := range w.layers {
		s.Release()
	}
	w.layers = nil
	for _, s := range []*weights.Set{w.table, w.norm} {
		if s != nil {
			s.Release()
		}
	}
	w.table, w.norm = nil, nil
	if w.gather != nil {
		w.gather.Finalize()
		w.gather = nil
	}
	return nil
}

// ResidentBytes is the device memory the resident tensors hold (0 when streamed).
func (w *CheckpointWeights) ResidentBytes() int64 {
	var n int64
	add := func(s *weights.Set) {
		if s == nil {
			return
		}
		for _, p := range s.Params() {
			if p.T != nil {
				n += int64(p.T.Shape().ByteSize())
			}
		}
	}
	for _, s := range w.layers {
		add(s)
	}
	add(w.table)
	add(w.norm)
	return n
}
