// Command convert turns a released MiniMax H3 transformer/ folder (config.json and BF16/F32
// safetensors, sharded or not) into a quantized checkpoint folder in the MLX converted format
// (mlx_h3_dit.safetensors + mlx_h3_dit.json, h3.md §10.3):
//
//	go run ./examples/convert -in MiniMax-H3/transformer -out h3-int6 -bits 6
//	go run ./examples/convert -in MiniMax-H3/transformer -out h3-int6-4step -bits 6 -adaln-steps 4 -backend xla:cuda
//
// The attention and FFN linears of every block and refiner block are quantized (affine, group 64,
// scales and biases in the source dtype); the other tensors keep their dtype. With -adaln-steps N
// the AdaLN tables of the N-step ladder (video shift 12, audio shift 3, plus t = 1) are computed by
// the DiT on -backend and stored in place of the 13B AdaLN projection weights; the checkpoint then
// serves only that ladder. This loads the whole transformer on the backend (66 GB in bf16 at
// release size: use a GPU). Without it the projections are kept and any ladder works.
//
// Memory: the quantized tensors are held in memory and encoded once more when written (about twice
// the output size: ~33 GB for INT6 at release size); the source is memory-mapped.
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
	"time"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/dit/h3"
	"fastvideo/internal/backend"
	"fastvideo/internal/safetensors"
	"fastvideo/quant"
	"fastvideo/schedule"
)

func main() { os.Exit(exitCode(run(os.Args[1:], os.Stdout), os.Stderr)) }

// usageError marks invalid input, which exits 2 like the other example
// binaries; everything else is a runtime failure (1).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

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
	in, out, backend, scaleDType, adalnDType string
	bits, group, adalnSteps                  int
	includeVSA                               bool
}

func parseFlags(args []string, w io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.in, "in", "", "released transformer/ folder (config.json + *.safetensors or an index)")
	fs.StringVar(&o.out, "out", "", "output folder for mlx_h3_dit.safetensors and mlx_h3_dit.json")
	fs.IntVar(&o.bits, "bits", 6, "bits per weight: 8, 6 or 4")
	fs.IntVar(&o.group, "group", quant.DefaultGroupSize, "quantization group size along the input dimension (32, 64, 128)")
	fs.StringVar(&o.scaleDType, "scale-dtype", "", `dtype of scales and biases: "" (the weight's own, BF16 for the release), bf16, f16 or f32`)
	fs.BoolVar(&o.includeVSA, "include-vsa", false, "keep (and quantize) the FastH3 VSA gate matrices attn.to_gate_compress")
	fs.IntVar(&o.adalnSteps, "adaln-steps", 0, "embed the AdaLN cache of this many-step ladder and drop the AdaLN projections (0: keep them)")
	fs.StringVar(&o.backend, "backend", "", `backend that computes the AdaLN tables: "" uses $GOMLX_BACKEND else go; e.g. xla:cuda`)
	fs.StringVar(&o.adalnDType, "adaln-dtype", "bf16", "compute and storage dtype of the AdaLN tables: bf16 (as MLX stores them) or f32")
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
	if o.adalnSteps < 0 {
		return o, usagef("-adaln-steps = %d; use 0 (keep the AdaLN projections) or a positive step count", o.adalnSteps)
	}
	return o, nil
}

func run(args []string, w io.Writer) error {
	o, err := parseFlags(args, w)
	if err != nil {
		return err
	}
	scheme := quant.Scheme{Bits: o.bits, GroupSize: o.group}
	if err := scheme.Validate(); err != nil {
		return usageError{fmt.Errorf("-bits %d -group %d: %w", o.bits, o.group, err)}
	}
	var scaleDT safetensors.DType
	switch o.scaleDType {
	case "":
	case "bf16":
		scaleDT = safetensors.BF16
	case "f16":
		scaleDT = safetensors.F16
	case "f32":
		scaleDT = safetensors.F32
	default:
		return usagef("-scale-dtype %q: use bf16, f16, f32 or leave it empty", o.scaleDType)
	}
	// First: a converted folder has no config.json, so reading it would hide the real mistake.
	if quant.IsCheckpoint(o.in) {
		return usagef("-in %s is already a converted checkpoint", o.in)
	}
	config, err := os.ReadFile(filepath.Join(o.in, "config.json"))
	if err != nil {
		return fmt.Errorf("reading the transformer config: %w (is -in a released transformer/ folder?)", err)
	}
	cfg, err := h3.ParseConfig(config)
	if err != nil {
		return err
	}
	ck, err := safetensors.OpenCheckpoint(o.in)
	if err != nil {
		return err
	}
	defer ck.Close()

	copts := quant.ConvertOptions{Scheme: scheme, ScaleDType: scaleDT, IncludeVSA: o.includeVSA}
	if o.adalnSteps > 0 {
		cache, tables, err := adalnCache(o, cfg, ck, w)
		if err != nil {
			return err
		}
		copts.AdaLN, copts.AdaLNTensors = cache, tables
	}

	t0 := time.Now()
	last := -1
	copts.Progress = func(done, total int, name string) {
		if pct := 10 * done / total; pct != last {
			last = pct
			fmt.Fprintf(w, "convert: %3d%% (%d/%d tensors, %s) %.0f s\n", 10*pct, done, total, name, time.Since(t0).Seconds())
		}
	}
	tensors, manifest, err := quant.Convert(ck, json.RawMessage(config), copts)
	if err != nil {
		return err
	}
	var bytes int64
	for _, t := range tensors {
		bytes += int64(len(t.Data))
	}
	if err := quant.WriteCheckpoint(o.out, tensors, manifest); err != nil {
		return err
	}
	ladder := "AdaLN projections kept (any ladder)"
	if manifest.AdaLNCache != nil {
		ladder = fmt.Sprintf("AdaLN cache for %d steps, timesteps %v", o.adalnSteps, manifest.AdaLNCache.Timesteps)
	}
	fmt.Fprintf(w, "convert: wrote %s: int%d group %d, %d quantized matrices, %d tensors, %.2f GB, %s; %.1f s\n",
		o.out, o.bits, o.group, len(manifest.QuantizedKeys), len(tensors), float64(bytes)/1e9, ladder, time.Since(t0).Seconds())
	return nil
}

// adalnCache computes the AdaLN tables of the -adaln-steps ladder with the dense DiT.
func adalnCache(o options, cfg h3.Config, src *safetensors.Checkpoint, w io.Writer) (*quant.AdaLNCache, []safetensors.Tensor, error) {
	var dt dtypes.DType
	switch o.adalnDType {
	case "bf16":
		dt = dtypes.BFloat16
	case "f32":
		dt = dtypes.Float32
	default:
		return nil, nil, fmt.Errorf("-adaln-dtype %q: use bf16 or f32", o.adalnDType)
	}
	sched, err := schedule.NewH3Schedule(o.adalnSteps)
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(o.backend)
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	m, err := h3.FromSource(b, cfg, src, h3.Options{DType: dt})
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
	return &quant.AdaLNCache{Timesteps: man.Timesteps, NumBlocks: man.NumBlocks, TablesPerBlock: man.TablesPerBlock, Steps: man.Steps}, tables, nil
}
