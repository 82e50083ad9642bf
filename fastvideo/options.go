package fastvideo

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"fastvideo/attention"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/compilecache"
	"fastvideo/internal/media"
	"fastvideo/quant"
)

// Options configure a VideoGenerator. The zero value is usable: every field left empty is taken
// from the environment when New starts (GOMLX_BACKEND for the backend), else from the defaults.
// This is the only place below the binaries where the SDK reads the environment.
type Options struct {
	// Backend is a GOMLX_BACKEND-style spec ("go", "xla:cuda", "xla:metal"); empty means
	// $GOMLX_BACKEND, then the pure-Go backend.
	Backend string
	DType   DType
	Memory  MemoryPolicy
	// PromptCacheDir stores encoded prompts; empty disables the cache.
	PromptCacheDir string
	// Filters run on the decoded frames, in order, between decode and mux.
	Filters []FrameFilter
	// RIFEDir holds the RIFE 4.25 weights the temporal fast mode (Request.Fast) interpolates with:
	// mlx-community/RIFE-4.25 (model.safetensors) or Practical-RIFE's flownet saved as
	// safetensors. Empty: the model's own (the tiny models carry a small random one), else none.
	RIFEDir string
	// Families are model families tried before the built-in ones.
	Families []family.Family

	// FFmpeg and FFprobe name the executables; empty means $FASTVIDEO_FFMPEG / $FASTVIDEO_FFPROBE,
	// then PATH.
	FFmpeg, FFprobe string
	// Attention forces an attention implementation; the zero value (attention.PathAuto) means
	// $FASTVIDEO_ATTENTION ("exact", "fused" or "auto"), else automatic.
	Attention attention.Path
	// QuantDispatch chooses the kernel of quantized linears; the zero value means
	// $FASTVIDEO_DQ_GEMM, else by row count.
	QuantDispatch quant.Dispatch
	// RandomWeights, when set, draws every model's weights from this seed instead of reading
	// checkpoints (see WithRandomWeights).
	RandomWeights *int64
	// X264Preset is libx264's speed preset for the MP4; empty means media.DefaultPreset (faster,
	// with media.DefaultLookahead).
	X264Preset string
	// Devices is how many accelerators of the host a generation spreads over (see WithDevices);
	// 0 means one.
	Devices int
	// LoRA are the adapters merged into the DiT when it loads, in order (see WithLoRA).
	LoRA []LoRA
	// TinyDecoder is the TAEHV checkpoint of Request.Decoder "tiny" and Request.Preview (see
	// WithTinyDecoder); empty: <model dir>/taehv/<variant>.safetensors, or the tiny models' own.
	TinyDecoder string
	// CompileCache is the folder of the persistent compile cache (see WithCompileCache): "" means
	// <user cache folder>/fastvideo/xla, "off" turns it off.
	CompileCache string
}

// Option edits Options.
type Option func(*Options) error

// EnvBackend is the environment variable naming the default backend.
const EnvBackend = "GOMLX_BACKEND"

// applyOptions folds opts into Options; the first invalid one is the error.
func applyOptions(opts []Option) (Options, error) {
	var o Options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

// backendSpec is the backend to open and where it came from, for messages.
func (o Options) backendSpec() (spec, field string) {
	if o.Backend != "" {
		return o.Backend, "backend"
	}
	return os.Getenv(EnvBackend), "$" + EnvBackend
}

// fromEnvironment fills the options left unset from the environment, once, when New starts: the
// only place the SDK reads it below the binaries. A bad value is invalid input naming the variable.
func (o Options) fromEnvironment() (Options, error) {
	o.FFmpeg = familykit.OrPreset(o.FFmpeg, os.Getenv(media.EnvFFmpeg))
	o.FFprobe = familykit.OrPreset(o.FFprobe, os.Getenv(media.EnvFFprobe))
	if o.Attention == attention.PathAuto {
		v := os.Getenv(attention.EnvVar)
		p, err := attention.ParsePath(v)
		if err != nil {
			return o, &RequestError{Field: "$" + attention.EnvVar, Value: v, Allowed: err.Error()}
		}
		o.Attention = p
	}
	if o.QuantDispatch == (quant.Dispatch{}) {
		v := os.Getenv(quant.DQGEMMEnv)
		d, err := quant.ParseDispatch(v)
		if err != nil {
			return o, &RequestError{Field: "$" + quant.DQGEMMEnv, Value: v, Allowed: err.Error()}
		}
		o.QuantDispatch = d
	}
	return o, nil
}

// families are the families to look models up in: the options' first, then the built-in ones.
func (o Options) families() []family.Family {
	return append(append([]family.Family(nil), o.Families...), families...)
}

// WithBackend selects the compute backend.
func WithBackend(spec string) Option {
	return func(o *Options) error { o.Backend = spec; return nil }
}

// WithDType selects the compute precision.
func WithDType(d DType) Option {
	return func(o *Options) error {
		switch DType(strings.ToLower(string(d))) {
		case DTypeAuto, F32, BF16, FP8:
			o.DType = DType(strings.ToLower(string(d)))
			return nil
		}
		return &RequestError{Field: "dtype", Value: string(d), Allowed: `"f32", "bf16", "fp8" (MiniMax H3: the DiT's core linears in float8) or "" (auto)`}
	}
}

// WithMemoryPolicy selects how many components stay resident.
func WithMemoryPolicy(p MemoryPolicy) Option {
	return func(o *Options) error {
		switch p {
		case "", AutoMemory, OneResident, AllResident:
			o.Memory = p
			return nil
		}
		return &RequestError{Field: "memory", Value: string(p), Allowed: fmt.Sprintf("%q (default), %q or %q", AutoMemory, OneResident, AllResident)}
	}
}

// WithPromptCache enables the prompt cache in dir.
func WithPromptCache(dir string) Option {
	return func(o *Options) error { o.PromptCacheDir = dir; return nil }
}

// WithFrameFilter appends a frame filter: it sees every decoded frame, clip by clip, and must give
// frames of the plan's output size.
func WithFrameFilter(f FrameFilter) Option {
	return func(o *Options) error {
		if f == nil {
			return &RequestError{Field: "frame_filter", Value: nil, Allowed: "a non-nil FrameFilter"}
		}
		o.Filters = append(o.Filters, f)
		return nil
	}
}

// WithRIFE sets Options.RIFEDir: the RIFE 4.25 checkpoint (a safetensors file or folder) of the
// temporal fast mode. New checks its tensor names and shapes.
func WithRIFE(dir string) Option {
	return func(o *Options) error {
		if dir == "" {
			return &RequestError{Field: "rife", Value: dir, Allowed: "a RIFE 4.25 checkpoint folder or file"}
		}
		o.RIFEDir = dir
		return nil
	}
}

// WithFFmpeg names the ffmpeg (and optionally ffprobe) executables.
func WithFFmpeg(ffmpeg, ffprobe string) Option {
	return func(o *Options) error { o.FFmpeg, o.FFprobe = ffmpeg, ffprobe; return nil }
}

// WithAttention forces an attention implementation (attention.PathExact is the exact oracle every
// fused path is tested against).
func WithAttention(p attention.Path) Option {
	return func(o *Options) error { o.Attention = p; return nil }
}

// WithQuantDispatch chooses the kernel of quantized linears.
func WithQuantDispatch(d quant.Dispatch) Option {
	return func(o *Options) error {
		if err := d.Validate(); err != nil {
			return &RequestError{Field: "quant_dispatch", Value: fmt.Sprintf("%+v", d), Allowed: err.Error()}
		}
		o.QuantDispatch = d
		return nil
	}
}

// WithRandomWeights runs models with weights drawn from seed instead of their checkpoints: a
// built-in model ("fasth3", "fastwan2.1-t2v-1.3b", ...) runs at release size without its download,
// and a snapshot folder at the geometry of its configs without its weight files. Large weights are
// drawn on the device. The output is noise, but every stage runs as in a real generation, so its
// timings and memory are real: for benchmarks and for tests on small configs.
func WithRandomWeights(seed int64) Option {
	return func(o *Options) error { o.RandomWeights = &seed; return nil }
}

// WithX264Preset sets libx264's speed preset. The default, faster with a 10-frame lookahead, is the
// slowest that keeps pace with the video decoders on a GPU host, with a short wait after the last
// frame (media.DefaultPreset, media.DefaultLookahead); a named preset, faster included, is libx264's
// own; medium is upstream's mux (a file a few percent smaller for the same CRF, at a longer wait).
func WithX264Preset(preset string) Option {
	return func(o *Options) error {
		if preset != "" && !slices.Contains(media.X264Presets, preset) {
			return &RequestError{Field: "x264_preset", Value: preset, Allowed: fmt.Sprintf("one of %v", media.X264Presets)}
		}
		o.X264Preset = preset
		return nil
	}
}

// WithDevices spreads each generation over n accelerators of one host. MiniMax H3's DiT is split
// tensor-parallel by attention heads and FFN width (each device holds 1/n of its blocks' weights);
// a Wan model with classifier-free guidance (the base Wan2.1 1.3B and Wan2.2 5B, n = 2) runs each
// step's unconditional forward on device 1 with a copy of the DiT while the conditional one runs on
// device 0. n > 1 needs an accelerator backend with n devices and a model that splits n ways (not
// FastWan, which has no guidance, nor the Wan 14B, whose tensor-parallel split is not built); New
// refuses anything else before loading, including a per-device share above the device's free memory.
func WithDevices(n int) Option {
	return func(o *Options) error {
		if n < 1 {
			return &RequestError{Field: "devices", Value: n, Allowed: "1 or more accelerators of this host"}
		}
		o.Devices = n
		return nil
	}
}

// WithLoRA adds a LoRA adapter (a safetensors file in any published layout: PEFT/diffusers, native
// Wan/ComfyUI/kohya, musubi, FastVideo's extractor, dense .diff deltas) at strength (1 applies it as
// trained: W += strength·(alpha/rank)·B·A). Repeatable: adapters apply in order. Like FastVideo's
// set_lora_adapter they are merged into the DiT's weights when it loads, before any FP8 conversion or
// AdaLN step cache, so they belong to the generator: every request of it runs with them, and another
// set needs another generator. New opens each file and checks it against the model's weights before
// loading anything (a missing file, a file that is no adapter, another model's adapter, mismatched
// shapes or ranks, NaN/Inf values: a *RequestError for "lora" naming the file); Plan and Validate
// check them too and the plan lists what each changes. A converted (quantized) checkpoint and random
// weights take no adapter.
func WithLoRA(path string, strength float64) Option {
	return func(o *Options) error {
		if path == "" {
			return &RequestError{Field: "lora", Value: path, Allowed: "the path of a LoRA adapter's .safetensors file"}
		}
		if math.IsNaN(strength) || math.IsInf(strength, 0) {
			return &RequestError{Field: "lora", Value: fmt.Sprintf("%s:%v", path, strength), Allowed: "a finite strength (1 applies the adapter as trained, 0 turns it off)"}
		}
		o.LoRA = append(o.LoRA, LoRA{Path: path, Strength: strength})
		return nil
	}
}

// WithTinyDecoder names the TAEHV tiny decoder's safetensors file (madebyollin/taehv: taew2_1 for
// Wan2.1 and Wan2.2-A14B, taew2_2 for Wan2.2-TI2V-5B, taeh3 for MiniMax H3) that Request.Decoder
// "tiny" and Request.Preview use. Without it a model folder's taehv/<variant>.safetensors is used,
// and the tiny models carry their own. New checks the file's layout against the model's latents (a
// missing file or another latent width is a *RequestError for tiny_decoder).
func WithTinyDecoder(path string) Option {
	return func(o *Options) error {
		if path == "" {
			return &RequestError{Field: "tiny_decoder", Value: path, Allowed: "a TAEHV .safetensors file (taew2_1, taew2_2 or taeh3)"}
		}
		o.TinyDecoder = path
		return nil
	}
}

// WithCompileCache keeps compiled XLA programs in dir between processes, so a second run loads them
// instead of compiling (most of a fresh FastH3 run's first minute): "" is the default folder,
// <user cache folder>/fastvideo/xla, and "off" compiles every program every time. Entries are keyed by
// the program, the compile options, the PJRT plugin, the devices and XLA_FLAGS, and checksummed: a
// damaged or foreign one is reported, removed and compiled again. On CUDA, XLA's per-fusion autotune
// results go to dir/autotune too (unless XLA_FLAGS names a folder for them). Loading executables needs
// the GPU build (bench/build_gpu.sh; BuildFeatures says whether this binary has it); a plain build keeps
// only the autotune results. A dir that is a file or cannot be written is a *RequestError for
// compile_cache; an unusable default folder only turns the cache off, with a warning.
func WithCompileCache(dir string) Option {
	return func(o *Options) error {
		if dir != "" && dir != compilecache.Off {
			if err := compilecache.Check(dir); err != nil {
				return &RequestError{Field: "compile_cache", Value: dir, Allowed: fmt.Sprintf(
					"a folder this process can write (%v): give another folder, \"off\" to compile every program, or \"\" for the default <user cache folder>/fastvideo/xla", err)}
			}
		}
		o.CompileCache = dir
		return nil
	}
}

// compileCacheDir resolves Options.CompileCache to a folder ("" when off) and, when the default
// folder cannot serve, says so. check tests that the default folder is writable (a plan does not:
// plans write nothing).
func (o Options) compileCacheDir(check bool) (dir, warning string) {
	switch o.CompileCache {
	case compilecache.Off:
		return "", ""
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Sprintf("compile cache off: no user cache folder (%v); choose one with WithCompileCache (-compile-cache DIR)", err)
		}
		dir = filepath.Join(base, "fastvideo", "xla")
		if check {
			if err := compilecache.Check(dir); err != nil {
				return "", fmt.Sprintf("compile cache off: %v; choose a folder with WithCompileCache (-compile-cache DIR)", err)
			}
		}
		return dir, ""
	}
	return o.CompileCache, ""
}

// WithFamily adds a model family, looked up before the built-in ones (a third-party family, or a
// test's).
func WithFamily(f family.Family) Option {
	return func(o *Options) error {
		if f == nil {
			return &RequestError{Field: "family", Value: nil, Allowed: "a non-nil family.Family"}
		}
		o.Families = append(o.Families, f)
		return nil
	}
}
