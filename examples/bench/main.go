// Command bench times one model component at release size with random weights
// on the chosen backend, e.g.
//
//	go run ./examples/bench -what h3audio -backend xla:cuda,tf32=false
//
// Each component lives in its own file and registers itself with register();
// its own flags are declared there too.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gomlx/compute"

	"fastvideo/attention"
	"fastvideo/internal/backend"
	"fastvideo/internal/fusedops"
	"fastvideo/internal/graphexec"
	"fastvideo/quant"
)

// common are the flags every benchmark honours, and the kernel choices parsed from the environment
// (attention.EnvVar, quant.DQGEMMEnv) that the benchmarks pass to the models explicitly.
type common struct {
	Warmup, Iters int
	Seed          uint64
	Attention     attention.Options
	Dispatch      quant.Dispatch
	// Window is -profile-window: the DiT forward it brackets for a profiler (nil or an empty tag: none).
	Window *profileWindow
}

var benches = map[string]func(b compute.Backend, c common) error{}

// specBenches open their backend themselves (through fastvideo.New) from the -backend spec.
var specBenches = map[string]func(spec string, c common) error{}

// registerSpec adds a benchmark that opens its own backend.
func registerSpec(name string, fn func(spec string, c common) error) {
	if _, dup := specBenches[name]; dup {
		panic("bench: " + name + " registered twice")
	}
	specBenches[name] = fn
}

// register adds a benchmark under name (called from each file's init).
func register(name string, fn func(b compute.Backend, c common) error) {
	if _, dup := benches[name]; dup {
		panic("bench: " + name + " registered twice")
	}
	benches[name] = fn
}

func names() string {
	var n []string
	for k := range benches {
		n = append(n, k)
	}
	for k := range specBenches {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

func main() {
	what := flag.String("what", "", "benchmark to run (one of the registered names)")
	spec := flag.String("backend", "", `backend spec: "" uses $GOMLX_BACKEND else go; e.g. xla:cuda or xla:cuda,tf32=false`)
	var c common
	flag.IntVar(&c.Warmup, "warmup", 1, "untimed runs after the first (compiling) one")
	flag.IntVar(&c.Iters, "iters", 10, "timed runs")
	flag.Uint64Var(&c.Seed, "seed", 1, "seed of the random weights and inputs")
	c.Window = &profileWindow{}
	flag.StringVar(&c.Window.tag, "profile-window", "", `h3dit, wandit, vsa, clip: after the timed runs of the measurement with this tag (as its report lines name it, e.g. "h3dit[adaln cached]", "wandit", "vsa[vsa 0.9 triton]" or "clip[default]": a whole warm Generate call), run one more forward between cuProfilerStart and cuProfilerStop for bench/kerneltrace.c or ncu --profile-from-start off (CUDA backends only)`)
	staging := flag.Bool("pinned-staging", true, "GPU build: large outputs cross to the host through page-locked staging (false: pageable copies, for an A/B)")
	kernelFiles := flag.String("kernel-files", "", "GPU build: comma-separated kernel files a generator has just written, each run in place of the embedded file of its name (fused_triton.json: internal/fusedops; vsa_triton.json, vsa_pack_triton.json: attention), to time a kernel before it is committed")
	flag.Parse()
	graphexec.SetPinnedStaging(*staging)
	if err := useKernelFiles(*kernelFiles); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -kernel-files:", err)
		os.Exit(2)
	}
	fn := benches[*what]
	if fn == nil && specBenches[*what] == nil {
		fmt.Fprintf(os.Stderr, "bench: -what %q is unknown; registered: %s\n", *what, names())
		os.Exit(2)
	}
	if err := c.readEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	var run func() error
	if sfn := specBenches[*what]; sfn != nil {
		if c.Window.tag != "" && *what != "clip" {
			fmt.Fprintf(os.Stderr, "bench: -profile-window is for -what h3dit, wandit, vsa and clip, not %s\n", *what)
			os.Exit(2)
		}
		if plan, err := backend.Resolve(*spec); err == nil {
			c.Window.runsOn(plan)
		}
		run = func() error { return sfn(*spec, c) }
	} else {
		b, plan, err := openBackend(*spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Printf("backend: %s\n", b.Description())
		c.Window.runsOn(plan)
		run = func() error { return fn(b, c) }
	}
	err := run()
	if err == nil {
		err = c.Window.check()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(exitCode(err))
	}
}

// openBackend is backend.New keeping the plan, which says whether the backend runs on CUDA.
func openBackend(spec string) (compute.Backend, *backend.Plan, error) {
	p, err := backend.Resolve(spec)
	if err != nil {
		return nil, nil, err
	}
	b, err := p.Open()
	return b, p, err
}

// readEnv parses the kernel choices of the environment; a bad value is invalid input.
func (c *common) readEnv() error {
	path, err := attention.ParsePath(os.Getenv(attention.EnvVar))
	if err != nil {
		return err
	}
	c.Attention = attention.Options{Path: path}
	c.Dispatch, err = quant.ParseDispatch(os.Getenv(quant.DQGEMMEnv))
	return err
}

// invalidFlag is a flag value the bench cannot run with: it exits 2 for it, as for an unknown -what,
// and 1 for a run that failed.
type invalidFlag struct{ error }

func badFlag(format string, args ...any) error { return invalidFlag{fmt.Errorf(format, args...)} }

func exitCode(err error) int {
	var bad invalidFlag
	if errors.As(err, &bad) {
		return 2
	}
	return 1
}

// medianIters refuses fewer than 3 timed runs to the benches that report a median.
func (c common) medianIters(bench string) error {
	if c.Iters < 3 {
		return badFlag("%s bench: -iters %d; use at least 3 for a median", bench, c.Iters)
	}
	return nil
}

// useKernelFiles runs the kernels of the files listed (-kernel-files) in place of the embedded files of
// their names.
func useKernelFiles(list string) error {
	if list == "" {
		return nil
	}
	for _, path := range strings.Split(list, ",") {
		data, err := os.ReadFile(path)
		if err == nil {
			if name := filepath.Base(path); name == "fused_triton.json" {
				err = fusedops.UseKernelFile(data)
			} else {
				err = attention.UseKernelFile(name, data)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
