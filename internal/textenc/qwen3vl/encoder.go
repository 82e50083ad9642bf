package qwen3vl

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/nn"
	"fastvideo/internal/weights"
)

// Options configure loading and encoding. The zero value streams float32 weights
// from a released checkpoint and returns the config's hidden state.
type Options struct {
	// Prefix is the tensor-name prefix of the text decoder (DefaultPrefix if empty).
	Prefix string
	// DType is the compute dtype of activations and weights: Float32 (default; CPU
	// and parity) or BFloat16 (GPU). Norm statistics, rotary angles and attention
	// scores are float32 either way.
	DType dtypes.DType
	// Resident keeps every needed tensor on the device; otherwise each decoder
	// layer is uploaded right before it runs and freed right after, and only the
	// prompt's embedding rows are read.
	Resident bool
	// HiddenStateIndex, when > 0, overrides Config.OutputHiddenStateIndex (see
	// there); MiniMax H3 uses H3HiddenStateIndex.
	HiddenStateIndex int
	// FinalNorm applies the final RMSNorm (model.norm) to the selected state, giving
	// HF's last_hidden_state when the index is num_hidden_layers. H3 does not.
	FinalNorm bool
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.DType == dtypes.InvalidDType {
		o.DType = dtypes.Float32
	}
	return o
}

// ResolveHiddenState is the hidden-state index an encoder with these options
// returns for cfg: the option, else the config's, else the last layer's output.
func (o Options) ResolveHiddenState(cfg Config) (int, error) {
	idx := o.HiddenStateIndex
	if idx <= 0 {
		idx = cfg.OutputHiddenStateIndex
	}
	if idx <= 0 {
		idx = cfg.NumHiddenLayers
	}
	if idx > cfg.NumHiddenLayers {
		return 0, fmt.Errorf("qwen3vl: hidden-state index %d exceeds num_hidden_layers = %d; pick 1..%d", idx, cfg.NumHiddenLayers, cfg.NumHiddenLayers)
	}
	return idx, nil
}

// Encoder runs the text decoder up to the configured hidden state. It is safe for
// concurrent use; calls are serialized because streamed weights are not shared.
type Encoder struct {
	cfg       Config
	backend   compute.Backend
	weights   Weights
	index     int
	finalNorm bool

	layer, norm    *Exec
	splice, inject *Exec // multimodal prompts only

	mu     sync.Mutex
	closer func() error
}

// NewEncoder builds an encoder over any Weights (a checkpoint, or random weights
// generated on the device for benchmarks); the caller keeps ownership of w. One
// decoder-layer executable serves every layer: it is compiled once per prompt
// length and weight dtype. opts.HiddenStateIndex and opts.FinalNorm apply here;
// the other options belong to LoadWeights.
func NewEncoder(backend compute.Backend, cfg Config, w Weights, opts Options) (*Encoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	idx, err := opts.ResolveHiddenState(cfg)
	if err != nil {
		return nil, err
	}
	e := &Encoder{cfg: cfg, backend: backend, weights: w, index: idx, finalNorm: opts.FinalNorm}
	e.layer, err = NewExec(backend, func(in []*Node) *Node {
		return DecoderLayer(cfg, in[0], in[1], in[2], in[3:])
	})
	if err != nil {
		return nil, err
	}
	e.layer.WithName("qwen3vl_decoder_layer")
	e.norm, err = NewExec(backend, func(x, w *Node) *Node { return nn.RMSNormCastFirst(x, w, cfg.RMSNormEps) })
	if err != nil {
		return nil, err
	}
	if err := newSpliceExecs(e); err != nil {
		return nil, err
	}
	return e, nil
}

// New loads weights from src (see LoadWeights) and returns an encoder that owns them.
func New(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*Encoder, error) {
	w, err := LoadWeights(backend, cfg, src, opts)
	if err != nil {
		return nil, err
	}
	e, err := NewEncoder(backend, cfg, w, opts)
	if err != nil {
		w.Close()
		return nil, err
	}
	e.closer = w.Close
	return e, nil
}

// Open opens a Qwen3-VL folder (config.json plus a single safetensors file or a
// sharded checkpoint with its index JSON) and returns an encoder that owns it.
func Open(backend compute.Backend, dir string, opts Options) (*Encoder, error) {
	return modelkit.OpenFolder(dir, "qwen3vl", LoadConfig, func(cfg Config, src weights.Source) (*Encoder, error) {
		return New(backend, cfg, src, opts)
	}, func(e *Encoder, closeSrc func() error) {
		wClose := e.closer
		e.closer = func() error { return errors.Join(wClose(), closeSrc()) }
	})
}

// Config returns the decoder geometry.
func (e *Encoder) Config() Config { return e.cfg }

// HiddenStateIndex is the index of the returned hidden state.
func (e *Encoder) HiddenStateIndex() int { return e.index }

// Close frees what the encoder owns.
func (e *Encoder) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	graphexec.FinalizeExecs(e.layer, e.norm, e.splice, e.inject)
	e.layer, e.norm, e.splice, e.inject = nil, nil, nil, nil
	if e.closer != nil {
		err := e.closer()
		e.closer = nil
		return err
	}
	return nil
}

// Encode returns the selected hidden state of the prompt ids as float32 [S, hidden].
// Token ids go in verbatim: no template, BOS or EOS is added (MiniMax H3's
// convention; the tokenizer decides what the ids are).
func (e *Encoder) Encode(ctx context.Context, ids []int) ([]float32, []int, error) {
	t, err := e.EncodeTensor(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	defer t.FinalizeAll()
	out, err := graphexec.HostF32(t)
	if err != nil {
		return nil, nil, err
	}
	return out, []int{len(ids), e.cfg.HiddenSize}, nil
}

// EncodeTensor is Encode leaving the result on the device, in the compute dtype.
// The caller owns the tensor (FinalizeAll it when done).
func (e *Encoder) EncodeTensor(ctx context.Context, ids []int) (*tensors.Tensor, error) {
	return e.forward(ctx, &forwardInputs{ids: ids, pos: TextPositions(len(ids))}, nil)
}

// Walk runs the forward pass and hands every hidden state on the way to fn as
// float32 [S, hidden]: index 0 is the embedding output, k the output of decoder
// layer k-1, up to the configured index; with FinalNorm, the normalized state is
// handed over last under the same index. It exists for parity tests and
// debugging: every state is copied to the host.
func (e *Encoder) Walk(ctx context.Context, ids []int, fn func(index int, hidden []float32) error) error {
	return e.walk(ctx, ids, 0, nil, fn, false)
}

// forwardInputs are one forward pass's token ids, rotary positions and, for prompts with
// images, the splice tensors.
type forwardInputs struct {
	ids []int
	pos [3][]int
	mm  *multimodalTensors
}

// forward runs the embedding and layers 0..index-1 one at a time, asking the
// Weights for each layer's tensors right before it runs and releasing them right
// after, so a streamed checkpoint keeps a single layer on the device.
func (e *Encoder) forward(ctx context.Context, in *forwardInputs, visit func(int, *tensors.Tensor) error) (x *tensors.Tensor, err error) {
	if len(in.ids) == 0 {
		return nil, fmt.Errorf("qwen3vl: the prompt has no tokens; encode at least one token id")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.layer == nil {
		return nil, fmt.Errorf("qwen3vl: encoder is closed")
	}
	defer func() {
		if err != nil && x != nil {
			x.FinalizeAll()
			x = nil
		}
	}()
	err = graphexec.Catch("qwen3vl", func() error {
		var err error
		if x, err = e.embed(in); err != nil {
			return err
		}
		if visit != nil {
			if err := visit(0, x); err != nil {
				return err
			}
		}
		cos, sin, err := RopeTables(e.cfg, in.pos)
		if err != nil {
			return err
		}
		s := len(in.ids)
		cosT := tensors.FromFlatDataAndDimensions(cos, s, e.cfg.HeadDim)
		sinT := tensors.FromFlatDataAndDimensions(sin, s, e.cfg.HeadDim)
		defer cosT.FinalizeAll()
		defer sinT.FinalizeAll()
		for i := 0; i < e.index; i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if x, err = e.runLayer(i, x, cosT, sinT, in.mm); err != nil {
				return err
			}
			if visit != nil && !(e.finalNorm && i+1 == e.index) {
				if err := visit(i+1, x); err != nil {
					return err
				}
			}
		}
		if !e.finalNorm {
			return nil
		}
		if x, err = e.applyFinalNorm(x); err != nil {
			return err
		}
		if visit != nil {
			return visit(e.index, x)
		}
		return nil
	})
	return x, err
}

// embed gathers the prompt's embedding rows and, for a prompt with images, splices the vision
// embeddings in at the placeholders.
func (e *Encoder) embed(in *forwardInputs) (*tensors.Tensor, error) {
	x, err := e.weights.Embed(in.ids)
	if err != nil || in.mm == nil {
		return x, err
	}
	return e.replace(x, func() (*tensors.Tensor, error) { return graphexec.Call1(e.splice, x, in.mm.keep, in.mm.embeds) }, "splicing the vision embeddings")
}

// runLayer runs decoder layer i on x (consumed), then adds layer i's DeepStack features.
func (e *Encoder) runLayer(i int, x, cosT, sinT *tensors.Tensor, mm *multimodalTensors) (*tensors.Tensor, error) {
	ws, release, err := e.weights.Layer(i)
	if err != nil {
		x.FinalizeAll()
		return nil, err
	}
	args := make([]any, 0, 3+len(ws))
	args = append(args, x, cosT, sinT)
	for _, w := range ws {
		args = append(args, w)
	}
	x, err = e.replace(x, func() (*tensors.Tensor, error) { return graphexec.Call1(e.layer, args...) }, fmt.Sprintf("decoder layer %d", i))
	release()
	if err != nil || mm == nil || i >= len(mm.deepstack) {
		return x, err
	}
	return e.replace(x, func() (*tensors.Tensor, error) { return graphexec.Call1(e.inject, x, mm.deepstack[i]) }, fmt.Sprintf("DeepStack features after layer %d", i))
}

func (e *Encoder) applyFinalNorm(x *tensors.Tensor) (*tensors.Tensor, error) {
	w, release, err := e.weights.FinalNorm()
	if err != nil {
		x.FinalizeAll()
		return nil, err
	}
	defer release()
	return e.replace(x, func() (*tensors.Tensor, error) { return graphexec.Call1(e.norm, x, w) }, "final norm")
}

// replace runs step on x and frees x, which the result replaces (x is freed on failure too).
func (e *Encoder) replace(x *tensors.Tensor, step func() (*tensors.Tensor, error), what string) (*tensors.Tensor, error) {
	y, err := step()
	x.FinalizeAll()
	if err != nil {
		return nil, fmt.Errorf("qwen3vl: %s: %w", what, err)
	}
	return y, nil
}
