package umt5

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/embedrows"
	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/nn"
	"fastvideo/internal/randweights"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// Options configure loading and encoding. The zero value computes in float32 and
// streams each block's weights to the device right before it runs.
type Options struct {
	// DType is the compute dtype of activations and weights: Float32 (default;
	// CPU and parity — Wan runs its text encoder in fp32) or BFloat16 (GPU). Norm
	// statistics, attention scores, softmax and activations are float32 either way.
	DType dtypes.DType
	// Resident uploads every block's weights once at load; otherwise each block is
	// uploaded right before it runs and freed right after (UMT5-XXL is 22.7 GB in
	// float32). The embedding table never goes to the device: only the prompt's
	// rows are read from the (memory-mapped) checkpoint.
	Resident bool
	// TextLen is the row count of EncodeWan's output (DefaultTextLen if 0).
	TextLen int
}

// Encoder runs the UMT5 encoder stack. It is safe for concurrent use; calls are
// serialized.
type Encoder struct {
	cfg      Config
	backend  compute.Backend
	src      weights.Source
	dtype    dtypes.DType
	textLen  int
	resident bool
	embed    safetensors.Info

	rel    []*weights.Set // one per block (UMT5) or one shared (T5); always resident
	final  *weights.Set   // encoder.final_layer_norm.weight; always resident
	blocks []*weights.Set // resident mode only

	block, norm *Exec

	mu     sync.Mutex
	closer func() error
}

// EmbeddingNames are the names the token-embedding table may have, in order of
// preference: transformers saves the tied table once, as shared.weight.
var EmbeddingNames = []string{"shared.weight", "encoder.embed_tokens.weight"}

// ignoredPrefixes are checkpoint names an encoder never reads: the decoder and
// LM head of a full T5 checkpoint.
var ignoredPrefixes = []string{"decoder.", "lm_head."}

// Load opens a released text_encoder/ folder (config.json plus a safetensors
// file, or shards with their *.safetensors.index.json) and returns an encoder
// that owns it.
func Load(backend compute.Backend, dir string, opts Options) (*Encoder, error) {
	return modelkit.OpenFolder(dir, "umt5", LoadConfig, func(cfg Config, src weights.Source) (*Encoder, error) {
		return FromSource(backend, cfg, src, opts)
	}, func(e *Encoder, closeSrc func() error) { e.closer = closeSrc })
}

// FromSource builds an encoder over the HF-named tensors of src (a checkpoint, a
// fixture's weights). src must stay open until Close: streamed blocks and the
// embedding rows are read from it on every Encode. Every tensor the forward pass
// needs is checked (name, shape, float dtype) before anything is uploaded, and
// all problems are reported in one *weights.BindError.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*Encoder, error) {
	if src == nil {
		return nil, fmt.Errorf("umt5: weight source is nil; pass an opened checkpoint")
	}
	opts, err := prepare(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	e := &Encoder{cfg: cfg, backend: backend, src: src, dtype: opts.DType, textLen: opts.TextLen, resident: opts.Resident}
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.build(func(_ int, s *weights.Set) error { return e.bind(s) })
}

// NewRandom builds a resident encoder with weights drawn from seed instead of read from a
// checkpoint: the blocks on the device by GoMLX's RNG (the fixture generator's scales), the
// embedding table, relative biases and final norm on the host. The table has cfg.VocabSize rows:
// keep it small (the ids of the tokenizer in use) for a release-size encoder, whose released
// 256k-row table would cost gigabytes of host memory for a gather of a few rows.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Encoder, error) {
	opts, err := prepare(backend, cfg, opts)
	if err != nil {
		return nil, err
	}
	small := map[string][]int{EmbeddingNames[0]: {cfg.VocabSize, cfg.DModel}, "encoder.final_layer_norm.weight": {cfg.DModel}}
	for i := 0; i < cfg.NumLayers; i++ {
		if i == 0 || cfg.PerLayerBias() {
			small[RelativeBiasName(i)] = []int{cfg.NumBuckets, cfg.NumHeads}
		}
	}
	src := weights.NewSynthetic(seed, small, nil)
	e := &Encoder{cfg: cfg, backend: backend, src: src, dtype: opts.DType, textLen: opts.TextLen, resident: true}
	e.embed, _ = src.Tensor(EmbeddingNames[0])
	drawer := randweights.NewDrawer(backend)
	defer drawer.Close()
	return e.build(func(i int, s *weights.Set) error {
		return drawer.Fill(s, e.dtype, seed+int64(i)+1, randweights.FixtureDraw)
	})
}

// prepare validates the options against cfg and the backend and fills their defaults.
func prepare(backend compute.Backend, cfg Config, opts Options) (Options, error) {
	var err error
	if opts.DType, err = modelkit.Prepare("umt5", cfg, backend, opts.DType, modelkit.HalfDTypes); err != nil {
		return opts, err
	}
	if opts.TextLen == 0 {
		opts.TextLen = DefaultTextLen
	}
	if opts.TextLen < 0 {
		return opts, fmt.Errorf("umt5: Options.TextLen = %d must be positive (Wan uses %d)", opts.TextLen, DefaultTextLen)
	}
	return opts, nil
}

// build uploads the relative biases and the final norm, the blocks through bindBlock when
// resident, and compiles the block and norm graphs.
func (e *Encoder) build(bindBlock func(i int, s *weights.Set) error) (*Encoder, error) {
	cfg, backend := e.cfg, e.backend
	err := graphexec.Catch("umt5", func() error {
		nRel := 1
		if cfg.PerLayerBias() {
			nRel = cfg.NumLayers
		}
		for i := 0; i < nRel; i++ {
			s := weights.NewSet("")
			s.Add(RelativeBiasName(i), cfg.NumBuckets, cfg.NumHeads)
			if err := e.bind(s); err != nil {
				return err
			}
			e.rel = append(e.rel, s)
		}
		e.final = weights.NewSet("")
		e.final.Add("encoder.final_layer_norm.weight", cfg.DModel)
		if err := e.bind(e.final); err != nil {
			return err
		}
		if e.resident {
			for i := 0; i < cfg.NumLayers; i++ {
				s := e.blockSet(i)
				if err := bindBlock(i, s); err != nil {
					return err
				}
				e.blocks = append(e.blocks, s)
			}
		}
		var err error
		e.block, err = NewExec(backend, func(in []*Node) *Node {
			return Block(cfg, in[0], in[1], in[2], in[3], in[4:])
		})
		if err != nil {
			return err
		}
		e.block.WithName("umt5_block")
		e.norm, err = NewExec(backend, func(x, w *Node) *Node { return nn.RMSNormCastFirst(x, w, cfg.LayerNormEps) })
		return err
	})
	if err != nil {
		e.release()
		return nil, err
	}
	return e, nil
}

func (e *Encoder) blockSet(i int) *weights.Set {
	s := weights.NewSet(blockPrefix(i))
	shapes := BlockTensorShapes(e.cfg)
	for k, n := range BlockTensorNames(e.cfg) {
		s.Add(n, shapes[k]...)
	}
	return s
}

func (e *Encoder) bind(s *weights.Set) error {
	// Unexpected names were already reported by check, over the whole checkpoint.
	return weights.Bind(e.src, s, weights.Options{DType: e.dtype, Backend: e.backend, AllowUnexpected: true})
}

// check validates every needed tensor from the headers alone, so that a wrong
// checkpoint fails before any weight is uploaded, and picks the embedding name.
func (e *Encoder) check() error {
	cfg := e.cfg
	type want struct {
		name  string
		shape []int
	}
	var wants []want
	known := map[string]bool{}
	add := func(name string, shape ...int) {
		wants = append(wants, want{name, shape})
		known[name] = true
	}
	for i := 0; i < cfg.NumLayers; i++ {
		shapes := BlockTensorShapes(cfg)
		for k, n := range BlockTensorNames(cfg) {
			add(blockPrefix(i)+n, shapes[k]...)
		}
		if i == 0 || cfg.PerLayerBias() {
			add(RelativeBiasName(i), cfg.NumBuckets, cfg.NumHeads)
		}
	}
	add("encoder.final_layer_norm.weight", cfg.DModel)

	var errs weights.BindError
	for _, n := range EmbeddingNames {
		known[n] = true
	}
	for _, n := range EmbeddingNames {
		if info, ok := e.src.Tensor(n); ok {
			e.embed = info
			break
		}
	}
	if e.embed.Name == "" {
		errs.Missing = append(errs.Missing, fmt.Sprintf("%s (or %s) [%d %d]", EmbeddingNames[0], EmbeddingNames[1], cfg.VocabSize, cfg.DModel))
	} else if len(e.embed.Shape) != 2 || e.embed.Shape[1] != cfg.DModel || e.embed.Shape[0] < cfg.VocabSize {
		// Released UMT5 tables have exactly vocab_size rows; more rows are harmless
		// (ids are checked against vocab_size), fewer would leave ids unembeddable.
		errs.Mismatched = append(errs.Mismatched, fmt.Sprintf("%s: checkpoint shape %v, config expects [%d %d] (vocab_size, d_model)", e.embed.Name, e.embed.Shape, cfg.VocabSize, cfg.DModel))
	} else if !e.embed.DType.IsFloat() {
		errs.Mismatched = append(errs.Mismatched, fmt.Sprintf("%s: checkpoint dtype %s is not a float type", e.embed.Name, e.embed.DType))
	}
	for _, w := range wants {
		info, ok := e.src.Tensor(w.name)
		switch {
		case !ok:
			errs.Missing = append(errs.Missing, fmt.Sprintf("%s %v", w.name, w.shape))
		case !slices.Equal(info.Shape, w.shape):
			errs.Mismatched = append(errs.Mismatched, fmt.Sprintf("%s: checkpoint shape %v, config expects %v", w.name, info.Shape, w.shape))
		case !info.DType.IsFloat():
			errs.Mismatched = append(errs.Mismatched, fmt.Sprintf("%s: checkpoint dtype %s is not a float type", w.name, info.DType))
		}
	}
	for _, n := range e.src.Names() {
		if known[n] || hasAnyPrefix(n, ignoredPrefixes) {
			continue
		}
		errs.Unexpected = append(errs.Unexpected, n)
	}
	if len(errs.Missing)+len(errs.Unexpected)+len(errs.Mismatched) == 0 {
		return nil
	}
	sort.Strings(errs.Missing)
	sort.Strings(errs.Unexpected)
	sort.Strings(errs.Mismatched)
	hint := ""
	if !cfg.PerLayerBias() {
		hint = " (config model_type \"t5\": only block 0 has a relative_attention_bias)"
	} else if _, ok0 := e.src.Tensor(RelativeBiasName(0)); ok0 && cfg.NumLayers > 1 && !hasName(e.src, RelativeBiasName(1)) {
		hint = " (only block 0 has a relative_attention_bias: this looks like a T5 checkpoint; its config.json should say model_type \"t5\")"
	}
	return fmt.Errorf("umt5: text encoder checkpoint does not match its config%s: %w", hint, &errs)
}

// Config returns the encoder geometry.
func (e *Encoder) Config() Config { return e.cfg }

// TextLen is the row count of EncodeWan's output.
func (e *Encoder) TextLen() int { return e.textLen }

// Close frees the device tensors and executables and closes the checkpoint if
// the encoder opened it.
func (e *Encoder) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.release()
	if e.closer != nil {
		err := e.closer()
		e.closer = nil
		return err
	}
	return nil
}

func (e *Encoder) release() {
	graphexec.FinalizeExecs(e.block, e.norm)
	e.block, e.norm = nil, nil
	for _, s := range append(append([]*weights.Set{e.final}, e.rel...), e.blocks...) {
		if s != nil {
			s.Release()
		}
	}
	e.final, e.rel, e.blocks = nil, nil, nil
}

// Encode runs the encoder on one sequence and returns transformers'
// last_hidden_state, float32 row-major [S, d_model]. mask (nil: every token is
// real) marks real tokens with 1 and padding with 0; padded keys are masked out
// of attention, but padded rows are computed and returned as transformers
// returns them (Wan's zeroing is a separate step: ZeroPadded, EncodeWan). No
// special token is added: ids come from the tokenizer with EOS already appended.
func (e *Encoder) Encode(ctx context.Context, ids, mask []int) ([]float32, []int, error) {
	var out []float32
	err := e.forward(ctx, ids, mask, func(i int, h *tensors.Tensor) error {
		if i < e.cfg.NumLayers {
			return nil
		}
		var err error
		out, err = graphexec.HostF32(h)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return out, []int{len(ids), e.cfg.DModel}, nil
}

// HiddenStates returns transformers' hidden_states tuple (output_hidden_states=True):
// num_layers+1 states of shape [S, d_model]; state 0 is the embedding output,
// state i (1 <= i < num_layers) the output of block i-1, and the last one the
// output of the final layer norm (= last_hidden_state; the un-normalized output
// of the last block is not part of the tuple). It exists for parity tests and
// debugging: every state is copied to the host.
func (e *Encoder) HiddenStates(ctx context.Context, ids, mask []int) ([][]float32, []int, error) {
	states := make([][]float32, e.cfg.NumLayers+1)
	err := e.forward(ctx, ids, mask, func(i int, h *tensors.Tensor) error {
		var err error
		states[i], err = graphexec.HostF32(h)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return states, []int{len(ids), e.cfg.DModel}, nil
}

// EncodeWan produces Wan's prompt embeddings for one prompt's token ids (from the
// tokenizer: EOS appended, truncated to text_len): float32 [text_len, d_model]
// whose first len(ids) rows are the encoder output and the rest zeros. This is
// FastVideo's torch path: TextEncodingStage tokenizes a single prompt with
// truncation at 512 and no padding, so the encoder sees exactly the valid tokens,
// and t5_postprocess_text (fastvideo/configs/pipelines/wan.py) keeps the first
// mask.sum() rows of last_hidden_state and appends zero rows up to 512. The DiT's
// cross-attention then attends over all 512 rows, zeros included. Running the
// prompt padded to 512 with a mask (the MLX path, or PadIDs + Encode + ZeroPadded)
// gives the same valid rows up to float rounding.
func (e *Encoder) EncodeWan(ctx context.Context, ids []int) ([]float32, []int, error) {
	if len(ids) > e.textLen {
		return nil, nil, fmt.Errorf("umt5: %d token ids exceed text_len = %d; truncate with the tokenizer (keeping the final EOS) before encoding", len(ids), e.textLen)
	}
	h, shape, err := e.Encode(ctx, ids, nil)
	if err != nil {
		return nil, nil, err
	}
	return ZeroPadded(h, shape, nil, e.textLen)
}

// ZeroPadded is Wan's t5_postprocess_text for one sequence: with n the number of
// mask entries > 0 (nil mask: all rows), it returns [textLen, D] holding the
// FIRST n rows of hidden [S, D] followed by zero rows. Like FastVideo it takes the
// first n rows rather than the masked ones, which is the same thing for the
// right-padded masks tokenizers produce.
func ZeroPadded(hidden []float32, shape []int, mask []int, textLen int) ([]float32, []int, error) {
	if len(shape) != 2 || shape[0]*shape[1] != len(hidden) {
		return nil, nil, fmt.Errorf("umt5: ZeroPadded wants hidden states [S, D] with S*D values; got shape %v and %d values", shape, len(hidden))
	}
	s, d := shape[0], shape[1]
	n := s
	if mask != nil {
		if len(mask) != s {
			return nil, nil, fmt.Errorf("umt5: ZeroPadded: mask has %d entries for %d rows; give one per row", len(mask), s)
		}
		n = 0
		for _, m := range mask {
			if m > 0 {
				n++
			}
		}
	}
	if textLen <= 0 {
		return nil, nil, fmt.Errorf("umt5: ZeroPadded: textLen = %d must be positive (Wan uses %d)", textLen, DefaultTextLen)
	}
	if n > textLen {
		return nil, nil, fmt.Errorf("umt5: ZeroPadded: %d valid rows exceed textLen = %d; truncate the tokens to textLen first", n, textLen)
	}
	out := make([]float32, textLen*d)
	copy(out, hidden[:n*d])
	return out, []int{textLen, d}, nil
}

// PadIDs right-pads ids with padID to textLen and returns the attention mask (1
// for the ids, 0 for padding): the fixed-length form of a prompt (the MLX path
// and batched encoding). It refuses ids longer than textLen: truncation belongs
// to the tokenizer, which keeps the final EOS.
func PadIDs(ids []int, textLen, padID int) (padded, mask []int, err error) {
	if len(ids) > textLen {
		return nil, nil, fmt.Errorf("umt5: %d token ids exceed text_len = %d; truncate with the tokenizer (keeping the final EOS) first", len(ids), textLen)
	}
	padded = make([]int, textLen)
	mask = make([]int, textLen)
	for i := range padded {
		if i < len(ids) {
			padded[i], mask[i] = ids[i], 1
		} else {
			padded[i] = padID
		}
	}
	return padded, mask, nil
}

// forward runs the stack, handing visit the states of HF's hidden_states tuple
// (index 0..num_layers) as device tensors that it must not keep.
func (e *Encoder) forward(ctx context.Context, ids, mask []int, visit func(int, *tensors.Tensor) error) error {
	if err := e.checkInputs(ids, mask); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.block == nil {
		return fmt.Errorf("umt5: encoder is closed")
	}
	s := len(ids)
	return graphexec.Catch("umt5", func() error {
		x, err := embedrows.LoadRows(e.embed, ids, e.dtype, e.backend)
		if err != nil {
			return err
		}
		defer func() { x.FinalizeAll() }()
		if err := visit(0, x); err != nil {
			return err
		}
		keyMask := make([]float32, s)
		for i := range keyMask {
			if mask == nil || mask[i] != 0 {
				keyMask[i] = 1
			}
		}
		bucketsT := tensors.FromFlatDataAndDimensions(RelativePositionBuckets(s, e.cfg.NumBuckets, e.cfg.MaxDistance), s, s)
		maskT := tensors.FromFlatDataAndDimensions(keyMask, s)
		defer bucketsT.FinalizeAll()
		defer maskT.FinalizeAll()
		for i := 0; i < e.cfg.NumLayers; i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			var set *weights.Set
			if e.resident {
				set = e.blocks[i]
			} else {
				set = e.blockSet(i)
				if err := e.bind(set); err != nil {
					return err
				}
			}
			rel := e.rel[0]
			if e.cfg.PerLayerBias() {
				rel = e.rel[i]
			}
			args := []any{x, bucketsT, maskT, rel.Params()[0].T}
			for _, p := range set.Params() {
				args = append(args, p.T)
			}
			y, err := graphexec.Call1(e.block, args...)
			if !e.resident {
				set.Release()
			}
			if err != nil {
				return fmt.Errorf("umt5: encoder block %d: %w", i, err)
			}
			x.FinalizeAll()
			x = y
			if i+1 < e.cfg.NumLayers {
				if err := visit(i+1, x); err != nil {
					return err
				}
			}
		}
		y, err := graphexec.Call1(e.norm, x, e.final.Params()[0].T)
		if err != nil {
			return fmt.Errorf("umt5: final layer norm: %w", err)
		}
		x.FinalizeAll()
		x = y
		return visit(e.cfg.NumLayers, x)
	})
}

func (e *Encoder) checkInputs(ids, mask []int) error {
	if len(ids) == 0 {
		return fmt.Errorf("umt5: no token ids; encode at least one token (the tokenizer appends EOS)")
	}
	if err := embedrows.CheckTokenIDs(ids, e.cfg.VocabSize); err != nil {
		return fmt.Errorf("umt5: %w", err)
	}
	if mask == nil {
		return nil
	}
	if len(mask) != len(ids) {
		return fmt.Errorf("umt5: attention mask has %d entries for %d token ids; give one per id (or nil for all real)", len(mask), len(ids))
	}
	valid := 0
	for i, m := range mask {
		if m != 0 && m != 1 {
			return fmt.Errorf("umt5: attention mask entry %d is %d; use 1 for a real token and 0 for padding", i, m)
		}
		valid += m
	}
	if valid == 0 {
		return fmt.Errorf("umt5: attention mask has no real token; at least one entry must be 1")
	}
	return nil
}

func hasName(src weights.Source, name string) bool {
	_, ok := src.Tensor(name)
	return ok
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
