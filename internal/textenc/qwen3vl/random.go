package qwen3vl

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/embedrows"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// RandomWeights are a text stack's weights drawn on the device from a seed instead of read from a
// checkpoint, so that a release-size encoder (tens of GB) runs without its download: the layers
// by GoMLX's RNG (matrices randn/√fan_in, norm gains 1+0.1·randn, the fixture generator's scales),
// the embedding rows of the prompt's ids on the host (a few hundred KB; each row depends only on
// the seed and its id). Resident, every layer is drawn once; streamed, each layer is drawn when
// the forward asks for it and freed after it ran, as a checkpoint's layers are read and freed.
type RandomWeights struct {
	cfg      Config
	backend  compute.Backend
	dtype    dtypes.DType
	seed     int64
	drawer   *randweights.Drawer
	resident []*weights.Set
	norm     *weights.Set
}

// NewRandom is New with weights drawn from seed (see RandomWeights) instead of read from a
// checkpoint.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Encoder, error) {
	w, err := NewRandomWeights(backend, cfg, opts, seed)
	if err != nil {
		return nil, err
	}
	e, err := NewEncoder(backend, cfg, w, opts)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	e.closer = w.Close
	return e, nil
}

// NewRandomWeights draws cfg's weights for the layers the forward with opts runs (through
// hidden_states[index]). opts.Resident draws them all now.
func NewRandomWeights(backend compute.Backend, cfg Config, opts Options, seed int64) (w *RandomWeights, err error) {
	opts = opts.withDefaults()
	if opts.DType, err = modelkit.Prepare("qwen3vl", cfg, backend, opts.DType, modelkit.HalfDTypes); err != nil {
		return nil, err
	}
	index, err := opts.ResolveHiddenState(cfg)
	if err != nil {
		return nil, err
	}
	w = &RandomWeights{cfg: cfg, backend: backend, dtype: opts.DType, seed: seed, drawer: randweights.NewDrawer(backend)}
	if !opts.Resident {
		return w, nil
	}
	defer func() {
		if err != nil {
			_ = w.Close()
		}
	}()
	for i := 0; i < index; i++ {
		set, err := w.drawLayer(i)
		if err != nil {
			return nil, err
		}
		w.resident = append(w.resident, set)
	}
	return w, nil
}

func (w *RandomWeights) drawLayer(i int) (*weights.Set, error) {
	set := weights.NewSet("model.language_model.layers." + strconv.Itoa(i) + ".")
	for k, shape := range LayerTensorShapes(w.cfg) {
		set.Add(LayerTensorNames[k], shape...)
	}
	if err := w.drawer.Fill(set, w.dtype, w.seed+int64(i)+1, randweights.FixtureDraw); err != nil {
		set.Release()
		return nil, fmt.Errorf("qwen3vl: drawing layer %d: %w", i, err)
	}
	return set, nil
}

// Embed implements Weights: row id is N(0, 1) values seeded by (seed, id).
func (w *RandomWeights) Embed(ids []int) (*tensors.Tensor, error) {
	if err := embedrows.CheckTokenIDs(ids, w.cfg.VocabSize); err != nil {
		return nil, fmt.Errorf("qwen3vl: %w", err)
	}
	d := w.cfg.HiddenSize
	rows := make([]float32, len(ids)*d)
	h := fnv.New64a()
	h.Write([]byte("qwen3vl.embed"))
	for r, id := range ids {
		rng := rand.New(rand.NewPCG(uint64(w.seed)^h.Sum64(), uint64(id)))
		for j := range d {
			rows[r*d+j] = float32(rng.NormFloat64())
		}
	}
	local := make([]int, len(ids))
	for i := range local {
		local[i] = i
	}
	table := safetensors.Info{Name: "embed", DType: safetensors.F32, Shape: []int{len(ids), d}, Data: safetensors.F32Bytes(rows)}
	return embedrows.LoadRows(table, local, w.dtype, w.backend)
}

// Layer implements Weights.
func (w *RandomWeights) Layer(i int) ([]*tensors.Tensor, func(), error) {
	if i < 0 || i >= w.cfg.NumHiddenLayers {
		return nil, nil, fmt.Errorf("qwen3vl: layer %d out of range [0, %d)", i, w.cfg.NumHiddenLayers)
	}
	if i < len(w.resident) {
		return tensorsOf(w.resident[i]), nop, nil
	}
	set, err := w.drawLayer(i)
	if err != nil {
		return nil, nil, err
	}
	return tensorsOf(set), set.Release, nil
}

// FinalNorm implements Weights.
func (w *RandomWeights) FinalNorm() (*tensors.Tensor, func(), error) {
	if w.norm == nil {
		w.norm = weights.NewSet("model.language_model.")
		w.norm.Add("norm.weight", w.cfg.HiddenSize)
		if err := w.drawer.Fill(w.norm, w.dtype, w.seed, randweights.FixtureDraw); err != nil {
			w.norm.Release()
			w.norm = nil
			return nil, nil, fmt.Errorf("qwen3vl: drawing the final norm: %w", err)
		}
	}
	return w.norm.Params()[0].T, nop, nil
}

// Close implements Weights.
func (w *RandomWeights) Close() error {
	for _, s := range w.resident {
		s.Release()
	}
	w.resident = nil
	if w.norm != nil {
		w.norm.Release()
		w.norm = nil
	}
	w.drawer.Close()
	return nil
}

func tensorsOf(set *weights.Set) []*tensors.Tensor {
	ps := set.Params()
	out := make([]*tensors.Tensor, len(ps))
	for i, p := range ps {
		out[i] = p.T
	}
	return out
}
