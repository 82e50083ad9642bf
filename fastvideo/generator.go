package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/fastvideo/framefilter"
	"fastvideo/internal/backend"
	"fastvideo/internal/compilecache"
	"fastvideo/internal/media"
	"fastvideo/internal/promptenhance"
	"fastvideo/internal/safefile"
)

// ErrClosed is returned by Generate after Close.
var ErrClosed = errors.New("fastvideo: the VideoGenerator is closed")

// VideoGenerator generates videos from text prompts with one model (FastVideo's VideoGenerator):
// with synchronized stereo audio for MiniMax H3, video only for Wan. Create it with New, call
// Generate any number of times, then Close.
//
// It is safe for concurrent use: Generate calls run one at a time (a generation already uses the
// whole device), in the order they acquire the generator, and Close waits for the running one.
//
// Memory: with the default AutoMemory policy each heavyweight component stays on the device between
// calls where it fits beside the others (the DiT first, then the decoders; the text encoder streams
// its layers when it does not fit), so a warm call reloads nothing it need not; the plan lists the
// decision. OneResident loads each at the stage that needs it and releases it at that stage's end
// (peak memory is the largest component); AllResident keeps them all.
type VideoGenerator struct {
	model   family.Model
	comps   family.Components
	engine  *family.Engine
	filters []FrameFilter
	// devices is the multi-device layout (nil on one device).
	devices *api.DevicePlan
	// rife opens the temporal fast mode's RIFE weights (WithRIFE, else the model's own; nil: none);
	// interp is the loaded interpolator while resident.
	rife   familykit.WeightOpener
	interp framefilter.Interpolator

	mu       sync.Mutex
	closed   bool
	warnings []string // reported once, by the next Generate
	// compile is the compile cache (WithCompileCache): its warnings, from whichever goroutine
	// compiled, are reported at the start and end of each Generate.
	compile *compileCacheRun

	// loads counts heavyweight loads (tokenizer, text encoder, DiT, VAEs); loadHook, when set,
	// sees each one. Tests use them to prove that bad requests fail before anything loads.
	loads    atomic.Int64
	loadHook func(component string)
}

// New opens a model for generation: a built-in toy ("tiny-h3", "tiny-wan": random weights, no
// files) or a snapshot folder of a supported family (MiniMax H3 / FastH3: transformer/, vae/,
// audio_vae/, text_encoder/, tokenizer/, scheduler/; Wan / FastWan: model_index.json,
// transformer/, vae/, text_encoder/, tokenizer/).
//
// New checks everything that can fail before any weight is read: the folder's configs parse and
// agree with each other, every component's weight files exist and their headers are valid, the
// compute backend starts, and an ffmpeg with libx264 (and AAC for models with audio) is available.
// It loads no weights. "fasth3", "h3", "wan2.1-t2v-1.3b", ... name specifications without weights:
// they work with Plan, and New asks for the snapshot folder instead. Invalid input is a
// *RequestError.
func New(ctx context.Context, model string, opts ...Option) (*VideoGenerator, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	if o, err = o.fromEnvironment(); err != nil {
		return nil, err
	}
	m, err := lookup(model, o.families())
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLoRAModel(m, o); err != nil {
		return nil, err
	}
	tools, err := media.FindTools(o.FFmpeg, o.FFprobe)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: %w", err)
	}
	cc := &compileCacheRun{}
	var cacheWarning string
	cc.dir, cacheWarning = o.compileCacheDir(true)
	e, err := openEngine(o, cc)
	if err != nil {
		return nil, err
	}
	e.Media = tools
	comps, err := m.Open(e)
	if err != nil {
		e.Backend.Finalize()
		return nil, err
	}
	devices, err := planDevices(e, comps)
	if err != nil {
		comps.Close()
		e.Backend.Finalize()
		return nil, err
	}
	g := &VideoGenerator{model: m, comps: comps, engine: e, filters: o.Filters, devices: devices, compile: cc}
	if cacheWarning != "" {
		g.warnings = append(g.warnings, cacheWarning)
	}
	if g.rife, err = rifeWeights(o, m); err != nil {
		comps.Close()
		e.Backend.Finalize()
		return nil, err
	}
	var budget memoryBudget
	if e.Residency, budget, err = chooseResidency(e, comps, g.rife); err == nil {
		err = checkFits(e, e.Residency, budget)
	}
	if err != nil {
		comps.Close()
		e.Backend.Finalize()
		return nil, err
	}
	if w := checkPromptCache(e.PromptCacheDir); w != "" {
		g.warnings = append(g.warnings, w)
	}
	return g, nil
}

// compileCacheRun is a generator's compile cache: its folder ("": off), its warnings, and the cache
// the backend took (nil: none installed).
type compileCacheRun struct {
	dir      string
	warnings asyncWarnings
	cache    *compilecache.Cache
}

// stats are the cache's counts so far (nil without a cache).
func (c *compileCacheRun) stats() *api.CompileCacheStats {
	if c == nil || c.cache == nil {
		return nil
	}
	s := c.cache.Stats()
	return &api.CompileCacheStats{Loaded: s.Hits, Compiled: s.Misses, Stored: s.Stores, Rejected: s.Rejected}
}

// takeWarnings returns the warnings so far and forgets them.
func (c *compileCacheRun) takeWarnings() []string {
	if c == nil {
		return nil
	}
	return c.warnings.take()
}

// note describes the cache for plans ("" without one).
func (c *compileCacheRun) note() string {
	if c == nil {
		return ""
	}
	return compileCacheNote(c.dir)
}

// statsSince is now minus before (nil when now is).
func statsSince(now, before *api.CompileCacheStats) *api.CompileCacheStats {
	if now == nil || before == nil {
		return now
	}
	return &api.CompileCacheStats{Loaded: now.Loaded - before.Loaded, Compiled: now.Compiled - before.Compiled,
		Stored: now.Stored - before.Stored, Rejected: now.Rejected - before.Rejected}
}

// asyncWarnings collects warnings from any goroutine until the generator reports them.
type asyncWarnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *asyncWarnings) add(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, err.Error())
}

// take returns the warnings so far and forgets them.
func (w *asyncWarnings) take() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	msgs := w.msgs
	w.msgs = nil
	return msgs
}

// rifeWeights are the interpolator weights: the folder of WithRIFE, else the model's own (the tiny
// models'), else none.
func rifeWeights(o Options, m family.Model) (familykit.WeightOpener, error) {
	if o.RIFEDir != "" {
		return framefilter.RIFEFolder("rife", o.RIFEDir)
	}
	if b, ok := m.(framefilter.BuiltinInterpolator); ok {
		if src := b.InterpolatorWeights(); src != nil {
			return familykit.InMemory(src), nil
		}
	}
	if o.RandomWeights != nil {
		src, err := framefilter.ReleaseRIFE(*o.RandomWeights + 5)
		if err != nil {
			return nil, err
		}
		return familykit.InMemory(src), nil
	}
	return nil, nil
}

// openEngine starts the backend, with the compile cache cc describes, and fixes the dtype and the
// memory policy.
func openEngine(o Options, cc *compileCacheRun) (*family.Engine, error) {
	spec, field := o.backendSpec()
	bp, err := backend.Resolve(spec)
	if err != nil {
		return nil, &RequestError{Field: field, Value: spec, Allowed: err.Error()}
	}
	bp.CompileCacheDir, bp.CompileCacheWarn = cc.dir, cc.warnings.add
	bp.FP8GEMMs = o.DType == FP8
	b, err := bp.Open()
	if err != nil {
		return nil, fmt.Errorf("fastvideo: starting the compute backend: %w", err)
	}
	cc.cache = bp.CompileCache
	e := &family.Engine{Backend: b, BackendSpec: bp.Spec, Accelerated: bp.Backend != backend.KindGo,
		Memory: familykit.OrPreset(o.Memory, AutoMemory), PromptCacheDir: o.PromptCacheDir,
		Attention: attention.Options{Path: o.Attention}, QuantDispatch: o.QuantDispatch, RandomWeights: o.RandomWeights,
		X264Preset: o.X264Preset, Devices: max(o.Devices, 1), LoRA: o.LoRA,
		TinyDecoderPath: o.TinyDecoder}
	e.FP8 = o.DType == FP8
	readMemory(e, bp)
	if s, ok := b.(interface {
		DeviceMemoryStats(compute.DeviceNum) (inUse, peak int64, err error)
	}); ok && e.DeviceMemory != nil {
		e.AllocatorMemory = func() (uint64, error) {
			inUse, _, err := s.DeviceMemoryStats(0)
			return uint64(max(inUse, 0)), err
		}
	}
	if n := o.Devices; n > 1 && (!e.Accelerated || b.NumDevices() < n) {
		have := fmt.Sprintf("%s has %d", bp.Spec, b.NumDevices())
		b.Finalize()
		return nil, &RequestError{Field: "devices", Value: n, Allowed: fmt.Sprintf(
			"at most the accelerator devices of the backend (%s; more than one needs an accelerator backend such as xla:cuda)", have)}
	}
	switch o.DType {
	case F32:
		e.DType = dtypes.Float32
	case BF16:
		e.DType = dtypes.BFloat16
	default:
		// The pure-Go backend is exact and fastest in f32 (its half-precision kernels are slow);
		// accelerators get bf16, the release precision.
		e.DType = dtypes.BFloat16
		if !e.Accelerated {
			e.DType = dtypes.Float32
		}
	}
	return e, nil
}

// readMemory gives e the memory readings of the backend bp resolves to, without starting it: the
// accelerator's through its driver, the host's for the pure-Go backend, whose device the host is.
func readMemory(e *family.Engine, bp *backend.Plan) {
	e.DeviceMemory = bp.MemoryStats()
	if !e.Accelerated {
		e.HostMemory = backend.HostAvailable
	}
}

// activationHeadroom is the device memory AutoMemory leaves beside the resident weights for a
// generation's activations, the compiled programs and the allocator's slack: FastH3 832x480x124 with
// every component resident (106.7 GiB of weights) peaked at 129.3 GiB of XLA pool on the H200
// (BENCHMARKS.md, "Whole clip"), 22.6 GiB above its weights.
const activationHeadroom = 24 << 30

// hostHeadroom is the same on the pure-Go backend, whose "device" is the host: its models are the
// tiny and small ones (a release model in float32 on a CPU is impractical), and the Go runtime
// returns freed memory.
const hostHeadroom = 2 << 30

// chooseResidency fixes where each component lives between calls: AutoMemory keeps, in the family's
// order (most costly to bring back first) and then the interpolator (rife: nil for none), what leaves
// every other component room to run in what the device can still give (family.ChooseResidency); the
// explicit policies keep all or none. The budget is the reading AutoMemory decided within.
func chooseResidency(e *family.Engine, comps family.Components, rife familykit.WeightOpener) ([]api.ComponentResidency, memoryBudget, error) {
	var sizes []api.ComponentSize
	if sizer, ok := comps.(family.ComponentSizer); ok {
		sizes = sizer.ComponentSizes()
	}
	if rife != nil {
		s, err := framefilter.RIFESize(e, rife)
		if err != nil {
			return nil, memoryBudget{}, err
		}
		sizes = append(sizes, s)
	}
	rs, budget := decideResidency(e, sizes)
	return rs, budget, nil
}

// decideResidency is chooseResidency over sizes already known (a plan's).
func decideResidency(e *family.Engine, sizes []api.ComponentSize) ([]api.ComponentResidency, memoryBudget) {
	if e.Memory != AutoMemory {
		return family.UniformResidency(e.Memory, sizes), memoryBudget{free: -1}
	}
	budget := readBudget(e)
	return family.ChooseResidency(budget.free, budget.headroom, sizes), budget
}

// memoryBudget is what AutoMemory decides within: the memory the device can still give this process
// (free, -1 where it cannot be read or an explicit policy decides) and what it leaves beside the weights
// for a generation's activations.
type memoryBudget struct{ free, headroom int64 }

// readBudget reads the engine's device (or, on the pure-Go backend, its host) once.
func readBudget(e *family.Engine) memoryBudget {
	b := memoryBudget{free: -1, headroom: activationHeadroom}
	switch {
	case e.DeviceMemory != nil:
		if f, err := deviceFree(e); err == nil {
			b.free = f
		}
	case !e.Accelerated && e.HostMemory != nil:
		if avail, err := e.HostMemory(); err == nil {
			b.free, b.headroom = int64(avail), hostHeadroom
		}
	}
	return b
}

// checkFits refuses, before anything loads, an AutoMemory generator one of whose components cannot
// run on its device even with nothing else kept beside it: without it the first call loads for a
// minute and then fails inside a denoising step with XLA's allocator message (FastH3 in bf16 on an
// 80 GB card, BENCHMARKS.md "Session 21"). The explicit policies are the way to try anyway (their
// budget reads nothing). rs were decided within budget, so the message quotes the reading they rest on.
func checkFits(e *family.Engine, rs []api.ComponentResidency, budget memoryBudget) error {
	if budget.free < 0 {
		return nil
	}
	for _, r := range rs {
		if r.Fits {
			continue
		}
		const gib = 1 << 30
		held, holds := r.RunningBytes(), fmt.Sprintf("needs %.2f GiB at %s", float64(r.Bytes)/gib, e.RunDType())
		if r.Residency == api.Streamed {
			holds = fmt.Sprintf("holds %.2f GiB at %s at a time, streamed (%.2f GiB in all)", float64(held)/gib,
				e.RunDType(), float64(r.Bytes)/gib)
		}
		where := "free to this process on this device"
		if !e.Accelerated {
			where = "available on this host"
		}
		need := float64(held+budget.headroom) / gib
		var fixes []string
		if !e.FP8 { // an FP8 run has no smaller dtype to offer
			fixes = append(fixes, "a smaller weight dtype where the model has one (-dtype fp8, Options.DType FP8: MiniMax H3's DiT)")
		}
		fixes = append(fixes, fmt.Sprintf("a device that gives at least %.2f GiB", need),
			"an explicit memory policy to try anyway (-memory one_resident, Options.Memory OneResident: each component "+
				"loads only at its stage; a small clip may fit)")
		return fmt.Errorf("fastvideo: %w: the %s %s and about %.2f GiB of activations beside it (%.2f GiB), and "+
			"%.2f GiB is %s; use %s", ErrDoesNotFit, r.Name, holds, float64(budget.headroom)/gib, need,
			float64(budget.free)/gib, where, strings.Join(fixes, ", "))
	}
	return nil
}

// deviceFree is what the accelerator can still give this process: its allocator's cap less what
// is in use (negative when others already hold more than the cap). e.DeviceMemory must be set.
func deviceFree(e *family.Engine) (int64, error) {
	used, limit, err := e.DeviceMemory()
	if err != nil {
		return 0, err
	}
	return int64(limit) - int64(used), nil
}

// planDevices lays the model out over the engine's devices and checks, before anything loads, that
// each device holds its share: the DiT's shard, its replicated weights, the video VAE and activationHeadroom
// within what the accelerator can still give this process.
func planDevices(e *family.Engine, comps family.Components) (*api.DevicePlan, error) {
	if e.Devices <= 1 {
		return nil, nil
	}
	splitter, ok := comps.(family.DeviceSplitter)
	if !ok {
		return nil, &RequestError{Field: "devices", Value: e.Devices, Allowed: "1: this model does not split over devices yet"}
	}
	dp, err := splitter.DevicePlan(e.Devices)
	if err != nil {
		return nil, err
	}
	withActivations(dp)
	if e.DeviceMemory == nil {
		return dp, nil
	}
	free, err := deviceFree(e)
	if err != nil {
		return nil, fmt.Errorf("fastvideo: reading the device memory for %d devices: %w", e.Devices, err)
	}
	if int64(dp.PerDeviceBytes) > free {
		return nil, &RequestError{Field: "devices", Value: e.Devices, Allowed: fmt.Sprintf(
			"a count whose share fits: each device needs %s, %.2f GiB is free", dp.Breakdown(), float64(free)/(1<<30))}
	}
	return dp, nil
}

// withActivations completes a device layout with each device's activation headroom and its total.
func withActivations(dp *api.DevicePlan) {
	dp.ActivationBytes = activationHeadroom
	dp.PerDeviceBytes = dp.DiTShardBytes + dp.DiTReplicatedBytes + dp.VideoVAEBytes + dp.ActivationBytes
}

// checkPromptCache returns a warning when the prompt cache folder cannot be written: the cache is
// an optimization, so the run goes on without it, but the user should know it caches nothing.
func checkPromptCache(dir string) string {
	if dir == "" {
		return ""
	}
	if err := checkWritableDir(dir); err != nil {
		return fmt.Sprintf("the prompt cache %q caches nothing: %v", dir, err)
	}
	return ""
}

// checkWritableDir creates dir if needed and proves a file can be created in it.
func checkWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return safefile.ProbeWrite(dir)
}

// Model describes the generator's model.
func (g *VideoGenerator) Model() ModelInfo { return g.model.Info() }

// Backend returns the compute backend's resolved spec and the compute dtype, e.g.
// "go:ops_sequential", "f32".
func (g *VideoGenerator) Backend() (spec string, dtype DType) {
	return g.engine.BackendSpec, g.engine.RunDType()
}

// Plan resolves a request against the generator's model without running it (see the package-level
// Plan).
func (g *VideoGenerator) Plan(req Request) (*GenerationPlan, error) {
	req = plannedPrompt(req)
	// Counted as the condition stage will count it: trimmed, as Resolve leaves it.
	if counter, ok := g.comps.(family.PromptCounter); ok && req.PromptTokens == 0 {
		if prompt := strings.TrimSpace(req.Prompt); prompt != "" {
			n, err := counter.PromptTokens(prompt)
			if err != nil {
				return nil, err
			}
			req.PromptTokens = n
		}
	}
	r, err := g.model.Resolve(req, false)
	if err != nil {
		return nil, err
	}
	if dc, ok := g.comps.(family.DecoderChecker); ok {
		if err := dc.CheckDecoder(r); err != nil {
			return nil, err
		}
	}
	p, err := r.Plan(g.engine.RunDType())
	if err != nil {
		return nil, err
	}
	p.Devices = g.devices
	p.Memory = family.ForDecoder(g.engine.Residency, p.Decoder, p.Preview)
	if lr, ok := g.comps.(family.LoRAReporter); ok {
		p.LoRA = lr.LoRAPlan()
	}
	return p, nil
}

// Generate runs one generation: validate, condition, denoise, decode (through the frame filters),
// mux. It writes the MP4 (unless req.SkipSave) and returns the result. Invalid requests fail with
// a *RequestError before anything is loaded. A cancelled ctx stops the run between denoising
// steps and decoded clips; Generate then returns an error wrapping ctx's
// (errors.Is(err, context.Canceled)) and leaves no output or temporary file behind.
func (g *VideoGenerator) Generate(ctx context.Context, req Request) (*Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	return g.run(ctx, req)
}

// Close releases the resident components and the backend, after waiting for a running Generate.
// The generator cannot be used afterwards; Close is idempotent.
func (g *VideoGenerator) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	err := errors.Join(g.comps.Close(), family.Release(&g.interp))
	g.engine.Backend.Finalize()
	return err
}

func (g *VideoGenerator) noteLoad(name string) {
	g.loads.Add(1)
	if g.loadHook != nil {
		g.loadHook(name)
	}
}

// String describes the generator.
func (g *VideoGenerator) String() string {
	return fmt.Sprintf("VideoGenerator(%s on %s, %s, %s)", g.comps.Describe(), g.engine.BackendSpec,
		api.DTypeOf(g.engine.DType), g.engine.Memory)
}

// Plan resolves a request against a model (a built-in name or a model folder) and returns what it
// will run. It validates like Generate (RequestError on bad input) but accepts an empty prompt.
// Options may set the weight dtype (WithDType) used for WeightsBytes; the default is the
// checkpoint's own precision.
func Plan(model string, req Request, opts ...Option) (*GenerationPlan, error) {
	o, m, r, err := resolveWith(model, req, false, opts)
	if err != nil {
		return nil, err
	}
	p, err := r.Plan(o.DType)
	if err != nil {
		return nil, err
	}
	p.Memory = planResidency(o, p.Memory)
	if p.Devices, err = planSpecDevices(m, o); err != nil {
		return nil, err
	}
	if p.LoRA, err = planLoRA(m, o); err != nil {
		return nil, err
	}
	dir, _ := o.compileCacheDir(false)
	p.CompileCache = compileCacheNote(dir)
	return p, nil
}

// checkLoRAModel refuses adapters for a model whose family merges none.
func checkLoRAModel(m family.Model, o Options) error {
	if _, ok := m.(family.LoRAPlanner); len(o.LoRA) > 0 && !ok {
		return &RequestError{Field: "lora", Value: o.LoRA[0].Path, Allowed: fmt.Sprintf("no adapter: the %s family's models take no LoRA adapters", m.Info().Family)}
	}
	return nil
}

// planLoRA validates the options' adapters against m's weights (headers only) and reports what each
// changes (nil without adapters).
func planLoRA(m family.Model, o Options) ([]api.PlanLoRA, error) {
	if len(o.LoRA) == 0 {
		return nil, nil
	}
	if err := checkLoRAModel(m, o); err != nil {
		return nil, err
	}
	return m.(family.LoRAPlanner).PlanLoRA(o.LoRA)
}

// planSpecDevices is the layout over o.Devices devices a generator of m would run (nil for one),
// from its specification: a plan shows what -gpus does before anything opens.
func planSpecDevices(m family.Model, o Options) (*api.DevicePlan, error) {
	if o.Devices <= 1 {
		return nil, nil
	}
	splitter, ok := m.(family.SpecSplitter)
	if !ok {
		return nil, &RequestError{Field: "devices", Value: o.Devices, Allowed: "1: this model does not split over devices yet"}
	}
	dp, err := splitter.PlanDevices(o.Devices, familykit.OrPreset(o.DType, BF16).Compute())
	if err != nil {
		return nil, err
	}
	withActivations(dp)
	return dp, nil
}

// planResidency decides the plan's residency for the device the options name, read without
// starting the backend (the accelerator's memory through its driver, the host's for the pure-Go
// backend); with no reading the sizes stay undecided.
func planResidency(o Options, rs []api.ComponentResidency) []api.ComponentResidency {
	if o, err := o.fromEnvironment(); err == nil {
		spec, _ := o.backendSpec()
		if bp, err := backend.Resolve(spec); err == nil {
			e := &family.Engine{Memory: familykit.OrPreset(o.Memory, AutoMemory), Accelerated: bp.Backend != backend.KindGo}
			readMemory(e, bp)
			if e.Memory != AutoMemory || e.DeviceMemory != nil || e.HostMemory != nil {
				decided, _ := decideResidency(e, family.Sizes(rs))
				return decided
			}
		}
	}
	return rs
}

// Validate checks a generation request against a model without loading anything heavy; unlike
// Plan it also requires a prompt, and it checks the output path.
func Validate(model string, req Request, opts ...Option) error {
	o, m, r, err := resolveWith(model, req, true, opts)
	if err != nil {
		return err
	}
	if _, err := planLoRA(m, o); err != nil {
		return err
	}
	if req.SkipSave {
		return nil
	}
	_, err = outputTarget(req.OutputPath, r.Common().Prompt)
	return err
}

// resolveWith applies opts, looks the model up and resolves req against it (needPrompt: Validate's
// rule, the prompt is required).
func resolveWith(model string, req Request, needPrompt bool, opts []Option) (Options, family.Model, family.Resolution, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return o, nil, nil, err
	}
	m, err := lookup(model, o.families())
	if err != nil {
		return o, nil, nil, err
	}
	r, err := m.Resolve(plannedPrompt(req), needPrompt)
	return o, m, r, err
}

// plannedPrompt is req with the prompt a run would use: enhanced when it asks (the template is
// deterministic, so the plan's prompt length is the run's; the run caches, plans never write).
func plannedPrompt(req Request) Request {
	if req.EnhancePrompt {
		if e, err := promptenhance.Template(req.Prompt); err == nil {
			req.Prompt = e
		}
	}
	return req
}
