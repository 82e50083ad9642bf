package taehv

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
	"fastvideo/internal/randweights"
	"fastvideo/internal/weights"
)

// Options configure a Decoder. The zero value decodes all latents at once in float32.
type Options struct {
	// DType is the weight and convolution dtype: Float32 (default, exact on the CPU), BFloat16 or
	// Float16 (the released files are fp16). The frames handed out are float32 either way.
	DType dtypes.DType
	// ChunkLatents bounds how many latent frames Decode runs through the graph at once (0: all).
	// Chunks carry every MemBlock's last input across the seam, so the frames are the same; memory
	// then grows with the chunk, not the video.
	ChunkLatents int
	// Encoder also binds the encoder (encoder.*) so that Encode works; without it those tensors are
	// skipped.
	Encoder bool
}

// Decoder is a loaded TAEHV decoder. Calls run one at a time (a second call waits).
type Decoder struct {
	cfg     Config
	opts    Options
	backend compute.Backend

	set    *weights.Set
	params []*weights.Param // graph inputs after the latents and the memories, in layer order

	encSet    *weights.Set     // Options.Encoder
	encParams []*weights.Param // encoder graph inputs after the frames

	guard modelkit.Guard
	execs modelkit.ExecCache[execKey]
}

// execKey picks one chunk graph: its latent geometry, whether it starts from empty memories, and
// whether it also returns the parity tests' activations.
type execKey struct {
	t, h, w int
	first   bool
	taps    bool
	keep    string // the raw frames the graph outputs, as framesKey writes them ("": all)
	rgb     bool   // the frames as interleaved 8-bit RGB (DecodeRGB24)
	enc     int    // encoder graphs: the number of clips (0: a decoder graph)
}

// framesKey writes ascending frame indices as a key ("" for nil: every frame).
func framesKey(keep []int) string {
	if keep == nil {
		return ""
	}
	parts := make([]string, len(keep))
	for i, k := range keep {
		parts[i] = strconv.Itoa(k)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// keyFrames reads framesKey's output back.
func keyFrames(key string) []int {
	if key == "" {
		return nil
	}
	fields := strings.Split(strings.Trim(key, "[]"), ",")
	keep := make([]int, len(fields))
	for i, f := range fields {
		keep[i], _ = strconv.Atoi(f) // framesKey wrote it
	}
	return keep
}

// Load opens a TAEHV safetensors file (taew2_1, taew2_2, taeh3 from madebyollin/taehv), reads the
// layout from its tensors (DetectConfig) and binds the decoder. H3 trimming is switched on for a
// file whose name contains "taeh3", as upstream does; FromSource takes an explicit Config.
func Load(backend compute.Backend, path string, opts Options) (*Decoder, error) {
	return modelkit.LoadCheckpoint(path, "taehv", func(src weights.Source) (*Decoder, error) {
		cfg, err := DetectConfig(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		cfg.H3Trim = strings.Contains(filepath.Base(path), "taeh3")
		return FromSource(backend, cfg, src, opts)
	})
}

// FromSource checks src against cfg (CheckSource) and binds the decoder.* tensors; encoder.* tensors
// are checked and bound with Options.Encoder, otherwise ignored.
func FromSource(backend compute.Backend, cfg Config, src weights.Source, opts Options) (*Decoder, error) {
	if err := CheckSource(src, cfg); err != nil {
		return nil, err
	}
	if opts.Encoder {
		if err := checkLayout(src, cfg.encoderLayout(), cfg); err != nil {
			return nil, err
		}
	}
	return modelkit.Populate(func() (*Decoder, error) { return newDecoder(backend, cfg, opts) }, func(d *Decoder) error {
		return modelkit.BindSource("taehv", tgrowSource{src, cfg}, d.set, d.opts.DType, backend, func() error {
			if d.encSet == nil {
				return nil
			}
			return modelkit.BindSource("taehv encoder", src, d.encSet, d.opts.DType, backend, nil)
		})
	})
}

// NewRandom builds a decoder for cfg with weights drawn on the backend from seed
// (randweights.FixtureDraw scales), for benchmarks and tiny test models; FromSource(…,
// FormulaSource(cfg), …) is the deterministic host alternative the parity fixtures use.
func NewRandom(backend compute.Backend, cfg Config, opts Options, seed int64) (*Decoder, error) {
	return modelkit.Populate(func() (*Decoder, error) { return newDecoder(backend, cfg, opts) }, func(d *Decoder) error {
		return modelkit.DrawRandom("taehv", d.set, d.opts.DType, backend, seed, randweights.FixtureDraw, func() error {
			if d.encSet == nil {
				return nil
			}
			return modelkit.DrawRandom("taehv encoder", d.encSet, d.opts.DType, backend, seed+1, randweights.FixtureDraw, nil)
		})
	})
}

// newDecoder validates the config and options and declares the parameters (unbound).
func newDecoder(backend compute.Backend, cfg Config, opts Options) (*Decoder, error) {
	var err error
	if opts.DType, err = modelkit.Prepare("taehv", cfg, backend, opts.DType, modelkit.HalfDTypes); err != nil {
		return nil, err
	}
	if opts.ChunkLatents < 0 {
		return nil, fmt.Errorf("taehv: Options.ChunkLatents = %d; want 0 (all at once) or a positive count", opts.ChunkLatents)
	}
	d := &Decoder{cfg: cfg, opts: opts, backend: backend, execs: modelkit.ExecCache[execKey]{}}
	d.set = weights.NewSet("decoder.")
	for _, spec := range cfg.decoderLayout() {
		d.params = append(d.params, d.set.Add(strings.TrimPrefix(spec.name, "decoder."), spec.shape...))
	}
	if opts.Encoder {
		d.declareEncoder()
	}
	return d, nil
}

// Params is the decoder's checkpoint parameter table for cfg, in graph input order.
func Params(cfg Config) (weights.Shapes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out weights.Shapes
	for _, spec := range cfg.decoderLayout() {
		out = append(out, weights.TensorShape{Name: spec.name, Shape: spec.shape})
	}
	return out, nil
}

// Config is the decoder's layout.
func (d *Decoder) Config() Config { return d.cfg }

// Close frees the weights and executables; later calls fail.
func (d *Decoder) Close() error {
	return d.guard.Close(func() error {
		d.execs.Finalize()
		d.set.Release()
		if d.encSet != nil {
			d.encSet.Release()
		}
		return nil
	})
}

func (d *Decoder) exec(key execKey) (*Exec, error) {
	return d.execs.Get(key, func() (*Exec, error) { return d.buildExec(key) })
}

// buildExec is the chunk graph of key: inputs latents [C, t, h, w], then (unless first) the nine
// MemBlock memories, then the weights; outputs the pixels of the kept frames [3, n, H, W], the nine
// new memories and,
// with taps, the activations tapLayers names.
func (d *Decoder) buildExec(key execKey) (*Exec, error) {
	nMem := 0
	if !key.first {
		nMem = len(memLayers)
	}
	e, err := NewExec(d.backend, func(in []*Node) []*Node {
		g := &chunkGraph{cfg: d.cfg, dt: d.opts.DType, p: graphexec.Bind(d.params, in[1+nMem:]), keep: keyFrames(key.keep), rgb: key.rgb}
		if !key.first {
			g.mem = in[1 : 1+nMem]
		}
		if key.taps {
			g.taps = map[int]*Node{}
		}
		out := append([]*Node{g.decode(in[0])}, g.next...)
		if key.taps {
			for _, l := range tapLayers {
				out = append(out, ConvertDType(g.taps[l], dtypes.Float32))
			}
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("taehv: building the decoder graph: %w", err)
	}
	return e.WithName(fmt.Sprintf("taehv.decode[t=%d,%dx%d,first=%v,keep=%s,rgb=%v]", key.t, key.h, key.w, key.first, key.keep, key.rgb)), nil
}

// tapLayers are the decoder layers whose outputs a taps graph returns (the fixtures' act.decoder.N).
var tapLayers = []int{5, 7, 13, 19, 22}
