// Command convert turns a released MiniMax H3 transformer/ folder (config.json and BF16/F32
// safetensors, sharded or not) into a quantized checkpoint folder in the MLX converted format
// (mlx_h3_dit.safetensors + mlx_h3_dit.json, see dit/h3's ConvertedManifest):
//
//	go run ./examples/convert -in MiniMax-H3/transformer -out h3-int6 -bits 6
//	go run ./examples/convert -in MiniMax-H3/transformer -out h3-int6-4step -bits 6 -adaln-steps 4 -backend xla:cuda
//	go run ./examples/convert -in MiniMax-H3/transformer -out h3-mxfp8 -mode mxfp8
//
// The attention and FFN linears of every block and refiner block are quantized (affine, group 64,
// scales and biases in the source dtype; a linear whose input width is not a multiple of the group
// size stays dense, as MLX does); the other tensors keep their dtype. -mode mxfp8, mxfp4 or nvfp4
// quantizes them in MLX's block-scaled float modes instead (mlx/ops.cpp fp_quantize, computed in
// float32: a BF16 source may differ from MLX's own conversion in the codes at a rounding boundary, as
// MLX rounds its intermediates to BF16), with -global-scale giving each nvfp4 matrix the global scale
// max|w|; the DiT loads those folders dequantized. With -adaln-steps N the AdaLN
// tables of the N-step ladder (video shift 12, audio shift 3, plus t = 1) are computed by the DiT on
// -backend and stored in place of the 13B AdaLN projection weights; the checkpoint then serves only
// that ladder. This loads the whole transformer on the backend (66 GB in bf16 at release size: use a
// GPU). Without it the projections are kept and any ladder works.
//
// Memory: the quantized tensors are held in memory and encoded once more when written (about twice
// the output size: ~33 GB for INT6 at release size); the source is memory-mapped.
//
// Exit status: 0 on success or -help, 2 for invalid input (flags, an -in folder that is not a released
// H3 transformer, an -out inside -in), 1 for failures while converting (including internal errors).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	"fastvideo/internal/backend"
	"fastvideo/internal/safefile"
	"fastvideo/internal/safetensors"
	"fastvideo/quant"
	"fastvideo/schedule"
)

func main() {
	os.Exit(exitCode(guarded(func() error { return run(os.Args[1:], os.Stdout) }), os.Stderr))
}

// usageError marks invalid input, which exits 2 like the other example
// binaries; everything else is a runtime failure (1).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// guarded runs fn and turns a panic into an internal error, which exits 1, never 2.
func guarded(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	return fn()
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "convert:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

type options struct {
	in, out, backend, mode   string
	globalScale              bool
	bits, group, adalnSteps  int
	includeVSA               bool
	scaleDType               safetensors.DType
	adalnDType               dtypes.DType
	scaleDTypeS, adalnDTypeS string
}

func parseFlags(args []string, w io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.in, "in", "", "released transformer/ folder (config.json + *.safetensors or an index)")
	fs.StringVar(&o.out, "out", "", "output folder for mlx_h3_dit.safetensors and mlx_h3_dit.json (not inside -in)")
	fs.StringVar(&o.mode, "mode", quant.ModeAffine, "quantization: affine (-bits, -group, -scale-dtype), mxfp8, mxfp4 or nvfp4")
	fs.BoolVar(&o.globalScale, "global-scale", false, "with -mode nvfp4: give each matrix the global scale max|w|")
	fs.IntVar(&o.bits, "bits", 6, "bits per weight: 8, 6 or 4")
	fs.IntVar(&o.group, "group", quant.DefaultGroupSize, "quantization group size along the input dimension (32, 64, 128)")
	fs.StringVar(&o.scaleDTypeS, "scale-dtype", "", `dtype of scales and biases: "" (the weight's own, BF16 for the release), bf16, f16 or f32`)
	fs.BoolVar(&o.includeVSA, "include-vsa", false, "keep (and quantize) the FastH3 VSA gate matrices attn.to_gate_compress")
	fs.IntVar(&o.adalnSteps, "adaln-steps", 0, "embed the AdaLN cache of this many-step ladder and drop the AdaLN projections (0: keep them)")
	fs.StringVar(&o.backend, "backend", "", `backend that computes the AdaLN tables: "" uses $GOMLX_BACKEND else go; e.g. xla:cuda`)
	fs.StringVar(&o.adalnDTypeS, "adaln-dtype", "bf16", "compute and storage dtype of the AdaLN tables: bf16 (as MLX stores them) or f32")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err}
	}
	if o.in == "" || o.out == "" {
		return o, usagef("-in and -out are required (see -help)")
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected arguments %v", fs.Args())
	}
	if err := o.checkMode(fs); err != nil {
		return o, err
	}
	return o, o.parseValues()
}

// checkMode refuses a -mode that is not one, and flags that the mode does not use.
func (o *options) checkMode(fs *flag.FlagSet) error {
	_, float := quant.LookupFloatMode(o.mode)
	if !float && o.mode != quant.ModeAffine {
		return usagef("-mode %q: use %s, %s, %s or %s", o.mode, quant.ModeAffine, quant.ModeMXFP8, quant.ModeMXFP4, quant.ModeNVFP4)
	}
	if o.globalScale && o.mode != quant.ModeNVFP4 {
		return usagef("-global-scale applies to -mode %s only, not %s", quant.ModeNVFP4, o.mode)
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if float && err == nil && (f.Name == "bits" || f.Name == "group" || f.Name == "scale-dtype") {
			err = usagef("-%s applies to -mode %s only; %s has its own bits, group and U8 scales", f.Name, quant.ModeAffine, o.mode)
		}
	})
	return err
}

// scaleDTypes are the values of -scale-dtype; "" keeps each weight's own dtype.
var scaleDTypes = map[string]safetensors.DType{"": "", "bf16": safetensors.BF16, "f16": safetensors.F16, "f32": safetensors.F32}

// adalnDTypes are the values of -adaln-dtype.
var adalnDTypes = map[string]dtypes.DType{"bf16": dtypes.BFloat16, "f32": dtypes.Float32}

// maxAdaLNSteps bounds -adaln-steps: the cache holds every visited timestep's tables of every block
// (the base model's 49 steps are about 0.16 GB at release size; each step more adds its share, so an
// unbounded count exhausts memory before any error).
const maxAdaLNSteps = 100

// parseValues checks the numeric and dtype flags.
func (o *options) parseValues() error {
	if err := (quant.Scheme{Bits: o.bits, GroupSize: o.group}).Validate(); err != nil {
		return usageError{fmt.Errorf("-bits %d -group %d: %w", o.bits, o.group, err)}
	}
	if o.adalnSteps < 0 || o.adalnSteps > maxAdaLNSteps {
		return usagef("-adaln-steps = %d; use 0 (keep the AdaLN projections) or a step count up to %d", o.adalnSteps, maxAdaLNSteps)
	}
	var ok bool
	if o.scaleDType, ok = scaleDTypes[o.scaleDTypeS]; !ok {
		return usagef("-scale-dtype %q: use bf16, f16, f32 or leave it empty", o.scaleDTypeS)
	}
	if o.adalnDType, ok = adalnDTypes[o.adalnDTypeS]; !ok {
		return usagef("-adaln-dtype %q: use bf16 or f32", o.adalnDTypeS)
	}
	return nil
}

// checkFolders refuses an -in that is not a released H3 transformer folder and an -out that is -in or
// lies inside it, before anything is read.
func checkFolders(o options) error {
	const fix = "pass the released transformer/ folder (config.json and *.safetensors)"
	st, err := os.Stat(o.in)
	switch {
	case err != nil:
		return usagef("-in %s: %v; %s", o.in, err, fix)
	case !st.IsDir():
		return usagef("-in %s is not a folder; %s", o.in, fix)
	case h3.IsConverted(o.in):
		// First: a converted folder has no config.json, so reporting that would hide the real mistake.
		return usagef("-in %s is already a converted checkpoint; %s", o.in, fix)
	}
	if entries, err := os.ReadDir(o.in); err == nil && len(entries) == 0 {
		return usagef("-in %s is an empty folder; %s", o.in, fix)
	}
	if _, err := os.Stat(filepath.Join(o.in, "config.json")); err != nil {
		return usagef("-in %s has no config.json, so it is not a released transformer folder; %s", o.in, fix)
	}
	in, err1 := realPath(o.in)
	out, err2 := realPath(o.out)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if rel, err := filepath.Rel(in, out); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return usagef("-out %s is -in %s or inside it; write the converted checkpoint to a folder outside the released one", o.out, o.in)
	}
	return nil
}

// realPath is the absolute path of p with symbolic links resolved, also when p does not exist
// yet (an -out to be created): its deepest existing ancestor is resolved and the rest joined
// on. Comparing real paths catches an -out that reaches -in through a link.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest), nil
		}
		if filepath.Dir(dir) == dir {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// maxConfigBytes bounds config.json: a released one is a few KB.
const maxConfigBytes = 1 << 20

// openSource reads the transformer config and opens the weights of -in, refusing a folder that is not
// an H3 transformer as invalid input.
func openSource(o options) (json.RawMessage, h3.Config, *safetensors.Checkpoint, error) {
	notH3 := func(err error) error {
		return usageError{fmt.Errorf("-in %s is not a released H3 transformer folder: %w", o.in, err)}
	}
	config, err := safefile.ReadFile(filepath.Join(o.in, "config.json"), maxConfigBytes)
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrTooLarge) {
		return nil, h3.Config{}, nil, notH3(err)
	}
	if err != nil {
		return nil, h3.Config{}, nil, fmt.Errorf("reading the transformer config: %w", err)
	}
	cfg, err := h3.ParseConfig(config)
	if err != nil {
		return nil, h3.Config{}, nil, notH3(err)
	}
	ck, err := safetensors.OpenCheckpoint(o.in)
	if err != nil {
		return nil, h3.Config{}, nil, notH3(err)
	}
	if !slices.ContainsFunc(ck.Names(), func(n string) bool { return strings.HasPrefix(n, "transformer_blocks.") }) {
		ck.Close()
		return nil, h3.Config{}, nil, notH3(errors.New("its weights hold no transformer_blocks.* tensors"))
	}
	return config, cfg, ck, nil
}

func run(args []string, w io.Writer) error {
	o, err := parseFlags(args, w)
	if err != nil {
		return err
	}
	if err := checkFolders(o); err != nil {
		return err
	}
	config, cfg, ck, err := openSource(o)
	if err != nil {
		return err
	}
	defer ck.Close()

	copts := h3.ConvertOptions{Scheme: quant.Scheme{Bits: o.bits, GroupSize: o.group}, ScaleDType: o.scaleDType, IncludeVSA: o.includeVSA}
	if o.mode != quant.ModeAffine {
		copts = h3.ConvertOptions{FloatMode: o.mode, GlobalScale: o.globalScale, IncludeVSA: o.includeVSA}
	}
	if o.adalnSteps > 0 {
		if copts.AdaLN, copts.AdaLNTensors, err = adalnCache(o, cfg, ck, w); err != nil {
			return err
		}
	}
	t0 := time.Now()
	copts.Progress = progress(w, t0)
	tensors, manifest, err := h3.Convert(ck, config, copts)
	if err != nil {
		return err
	}
	if err := h3.WriteConverted(o.out, tensors, manifest); err != nil {
		return err
	}
	report(w, o, tensors, manifest, time.Since(t0))
	return nil
}

// progress prints a line every 10 % of the source tensors.
func progress(w io.Writer, t0 time.Time) func(done, total int, name string) {
	last := -1
	return func(done, total int, name string) {
		if pct := 10 * done / total; pct != last {
			last = pct
			fmt.Fprintf(w, "convert: %3d%% (%d/%d tensors, %s) %.0f s\n", 10*pct, done, total, name, time.Since(t0).Seconds())
		}
	}
}

// report prints what was written.
func report(w io.Writer, o options, tensors []safetensors.Tensor, m *h3.ConvertedManifest, took time.Duration) {
	var bytes int64
	for _, t := range tensors {
		bytes += int64(len(t.Data))
	}
	ladder := "AdaLN projections kept (any ladder)"
	if m.AdaLNCache != nil {
		ladder = fmt.Sprintf("AdaLN cache for %d steps, timesteps %v", o.adalnSteps, m.AdaLNCache.Timesteps)
	}
	scheme := fmt.Sprintf("int%d group %d", o.bits, o.group)
	if fm, ok := quant.LookupFloatMode(o.mode); ok {
		scheme = fmt.Sprintf("%s (%d bits, group %d)", o.mode, fm.Bits, fm.Group)
	}
	fmt.Fprintf(w, "convert: wrote %s: %s, %d quantized matrices (%d kept dense: input width not a multiple of the group), %d tensors, %.2f GB, %s; %.1f s\n",
		o.out, scheme, len(m.Quant.QuantizedKeys), len(m.Quant.DenseKeys), len(tensors), float64(bytes)/1e9, ladder, took.Seconds())
}

// adalnCache computes the AdaLN tables of the -adaln-steps ladder with the dense DiT.
func adalnCache(o options, cfg h3.Config, src *safetensors.Checkpoint, w io.Writer) (*h3.AdaLNManifest, []safetensors.Tensor, error) {
	sched, err := schedule.NewH3Schedule(o.adalnSteps)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("-adaln-steps %d: %w", o.adalnSteps, err)}
	}
	b, err := backend.New(o.backend)
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	m, err := h3.FromSource(b, cfg, src, h3.Options{DType: o.adalnDType})
	if err != nil {
		return nil, nil, fmt.Errorf("loading the DiT for the AdaLN tables: %w", err)
	}
	defer m.Close()
	c, err := m.PrepareAdaLN(sched.Video.Timesteps, sched.Audio.Timesteps)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	if want := sched.AdaLNCacheTimesteps(); !slices.Equal(c.Timesteps, want) {
		return nil, nil, fmt.Errorf("AdaLN cache keys %v differ from the schedule's %v", c.Timesteps, want)
	}
	tables, man, err := m.ExportAdaLNCache(c, o.adalnSteps)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(w, "convert: AdaLN tables for %d steps (%d timesteps) on %s in %.1f s\n",
		o.adalnSteps, len(man.Timesteps), b.Name(), time.Since(t0).Seconds())
	return &man, tables, nil
}
