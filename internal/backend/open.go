package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	_ "github.com/gomlx/gomlx/backends/default" // registers "go" and, unless -tags noxla, "xla"

	"fastvideo/internal/xlaext"
)

// New resolves spec (see ResolveWith for the rules) and creates the backend.
func New(spec string) (compute.Backend, error) {
	p, err := Resolve(spec)
	if err != nil {
		return nil, err
	}
	return p.Open()
}

// openMu serialises Open: it edits the process environment and the dynamic loader's state.
var openMu sync.Mutex

// preloadedLibs remembers what this process dlopened, so a second Open does not redo it.
var preloadedLibs = map[string]bool{}

// Open prepares the process (environment, preloaded libraries, cuda-named link) and creates
// the backend. It records what it did in p (LoadPath, Preloaded, PreloadFailed, Config).
func (p *Plan) Open() (b compute.Backend, err error) {
	openMu.Lock()
	defer openMu.Unlock()
	if !slices.Contains(compute.List(), string(p.Backend)) {
		why := ""
		if p.Backend == KindXLA {
			why = " (the binary was built with -tags noxla or CGO_ENABLED=0; rebuild with cgo, or use GOMLX_BACKEND=go)"
		}
		return nil, fmt.Errorf("backend %q is not compiled into this binary%s; compiled in: %q", p.Backend, why, compute.List())
	}
	if p.Backend == KindXLA {
		if err := p.prepareXLA(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("creating backend %s: panic: %v", p, r)
		}
	}()
	b, err = compute.NewWithConfig(p.Config)
	if err != nil {
		hint := ""
		if p.Backend == KindXLA && p.IsCUDA() {
			hint = "; if a CUDA library is missing, try " + EnvPreload + "=1, or set " + EnvPlugin +
				" to another plugin, or use GOMLX_BACKEND=go"
		}
		return nil, fmt.Errorf("creating backend %s: %w%s", p, err, hint)
	}
	p.openCompileCache(b)
	if p.Backend == KindXLA {
		p.PluginVersion = PluginVersion(p.Plugin)
		xlaext.SetPlugin(b, p.PluginVersion)
	}
	return b, nil
}

// PluginVersion names the Python distribution that installed the plugin at path, "name version"
// (jax_plugins/xla_cuda13/xla_cuda_plugin.so in site-packages: "jax-cuda13-plugin 0.11.2", from the
// jax_cuda13_plugin-0.11.2.dist-info folder beside jax_plugins), or "" when none is found (a plugin
// from elsewhere). GPU kernels (internal/xlaext) are made for one plugin and checked against it.
func PluginVersion(path string) string {
	site, dist, ok := pluginDistribution(path)
	if !ok {
		return ""
	}
	found, _ := filepath.Glob(filepath.Join(site, dist+"-*.dist-info"))
	if len(found) != 1 {
		return ""
	}
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(found[0]), dist+"-"), ".dist-info")
	return strings.ReplaceAll(dist, "_", "-") + " " + version
}

// EnvMosaicGPURuntime is where the plugin's Mosaic GPU handler finds the runtime library its kernels'
// host code links (jaxlib/mosaic/gpu/custom_call.cc reads it; JAX's Python sets it on import).
const EnvMosaicGPURuntime = "MOSAIC_GPU_RUNTIME_LIB_PATH"

// mosaicGPURuntime is the Mosaic GPU runtime library that the wheel of the plugin at path installed
// (site-packages/jax_cuda13_plugin/libmosaic_gpu_runtime.so beside jax_plugins/xla_cuda13), or "" when
// there is none, as a regular file.
func mosaicGPURuntime(path string) string {
	site, dist, ok := pluginDistribution(path)
	if !ok {
		return ""
	}
	lib := filepath.Join(site, dist, "libmosaic_gpu_runtime.so")
	if fi, err := os.Stat(lib); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return lib
}

// pluginDistribution is the site-packages folder and the Python package name (jax_cuda13_plugin) of
// the JAX wheel that installed the plugin at path (jax_plugins/xla_cuda13/xla_cuda_plugin.so), false
// for a plugin from elsewhere.
func pluginDistribution(path string) (site, dist string, ok bool) {
	dir := filepath.Dir(path)
	if filepath.Base(filepath.Dir(dir)) != "jax_plugins" {
		return "", "", false
	}
	return filepath.Dir(filepath.Dir(dir)), "jax_" + strings.TrimPrefix(filepath.Base(dir), "xla_") + "_plugin", true
}

// openCompileCache installs the compile cache into b where it can, and says what happened.
func (p *Plan) openCompileCache(b compute.Backend) {
	if p.Backend != KindXLA || p.CompileCacheDir == "" {
		return
	}
	p.CompileCache = installCompileCache(b, p.CompileCacheDir, p.CompileCacheWarn)
	note := "compile cache " + p.CompileCacheDir
	if p.CompileCache == nil {
		note = "no compile cache in this build (" + GPUBuildHint + ")"
	}
	if p.CompileCacheNote != "" {
		note += "; " + p.CompileCacheNote
	}
	p.CompileCacheNote = note
}

func (p *Plan) prepareXLA() error {
	// go-xla read this at init already; the absolute plugin path is what really prevents a download.
	// Setting it still covers child processes and any later GoMLX call without a spec.
	setenvDefault("GOMLX_NO_AUTO_INSTALL", "1")
	if err := checkLoadable(p.Plugin); err != nil {
		return fmt.Errorf("PJRT plugin: %w", err)
	}
	p.LoadPath = p.Plugin
	if !p.IsCUDA() {
		p.Config = xlaConfig(p.LoadPath, p.Options)
		return nil
	}
	if p.needsCUDAName {
		link, err := cudaNamedLink(p.Plugin)
		if err != nil {
			return fmt.Errorf("plugin %s: go-xla treats a plugin as CUDA only when its path contains \"cuda\", "+
				"and linking it as pjrt_c_api_cuda_plugin.so failed: %v; rename or symlink it yourself and set %s", p.Plugin, err, EnvPlugin)
		}
		p.LoadPath = link
	}
	opts, fraction, err := cudaOptions(p.Options)
	if err != nil {
		return err
	}
	p.MemoryFraction = fraction
	p.Config = xlaConfig(p.LoadPath, opts)
	if p.CUDADataDir != "" && !xlaFlagSet("--xla_gpu_cuda_data_dir") {
		appendXLAFlag("--xla_gpu_cuda_data_dir", p.CUDADataDir)
	}
	if p.CompileCacheDir != "" {
		p.CompileCacheNote = setAutotuneFlag(p.CompileCacheDir)
	}
	if lib := mosaicGPURuntime(p.Plugin); lib != "" {
		setenvDefault(EnvMosaicGPURuntime, lib)
	}
	p.setGEMMFlag()
	if p.LibMode == LibsRPATH || p.LibMode == LibsPreload {
		// go-xla looks for <plugin>/../../nvidia (its own install layout) and warns when the wheel layout lacks it.
		setenvDefault("GOPJRT_CUDA_CHECKS", "0")
	}
	if p.LibMode == LibsPreload {
		files := preloadCandidates(p.LibDirs)
		var todo []string
		for _, f := range files {
			if !preloadedLibs[f] {
				todo = append(todo, f)
			}
		}
		loaded, failed := preloadAll(todo, checkedDlopen)
		for _, f := range loaded {
			preloadedLibs[f] = true
		}
		p.Preloaded, p.PreloadFailed = loaded, failed
		if len(files) > 0 && len(loaded) == 0 && len(todo) > 0 {
			return fmt.Errorf("plugin %s: none of the %d CUDA libraries in %s could be preloaded: %s",
				p.Plugin, len(todo), strings.Join(p.LibDirs, ", "), strings.Join(failed, "; "))
		}
	}
	return nil
}

// checkedDlopen dlopens a library that passed checkLoadable.
// DefaultMemoryFraction caps XLA's CUDA allocator at this fraction of the device's memory unless the
// spec sets memory_fraction: go-xla's default (0.75) would leave a quarter of an H200 unused, too
// little for FastH3's DiT and text encoder resident together.
const DefaultMemoryFraction = "0.92"

// cudaOptions are the go-xla options of a CUDA spec, with the memory fraction defaulted. It
// returns the fraction in force too: it caps XLA's allocator, so it bounds what can stay resident.
func cudaOptions(options string) (string, float64, error) {
	var kept []string
	fraction := -1.0
	for _, o := range strings.Split(options, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(o), "=")
		switch k {
		case "":
			continue
		case "memory_fraction":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 || f > 1 {
				return "", 0, fmt.Errorf("memory_fraction=%q: give a number in (0, 1]", v)
			}
			fraction = f
		}
		kept = append(kept, strings.TrimSpace(o))
	}
	if fraction < 0 {
		kept = append(kept, "memory_fraction="+DefaultMemoryFraction)
		fraction, _ = strconv.ParseFloat(DefaultMemoryFraction, 64)
	}
	return strings.Join(kept, ","), fraction, nil
}

func checkedDlopen(path string) error {
	if err := checkLoadable(path); err != nil {
		return err
	}
	return dlopenGlobal(path)
}

func setenvDefault(k, v string) {
	if _, ok := os.LookupEnv(k); !ok {
		_ = os.Setenv(k, v)
	}
}

// tritonGEMMFlag switches XLA's Triton GEMM emitter (Plan.FP8GEMMs turns it off).
const tritonGEMMFlag = "--xla_gpu_enable_triton_gemm"

// setGEMMFlag turns XLA's Triton GEMMs off for a run with FP8 GEMMs, unless the user set the flag.
func (p *Plan) setGEMMFlag() {
	if p.FP8GEMMs && !xlaFlagSet(tritonGEMMFlag) {
		appendXLAFlag(tritonGEMMFlag, "false")
	}
}

// xlaFlagSet reports whether $XLA_FLAGS already names flag (the user's setting wins).
func xlaFlagSet(flag string) bool { return strings.Contains(os.Getenv("XLA_FLAGS"), flag) }

// appendXLAFlag adds flag=value to $XLA_FLAGS, which XLA reads when the plugin creates its client.
func appendXLAFlag(flag, value string) {
	_ = os.Setenv("XLA_FLAGS", strings.TrimSpace(os.Getenv("XLA_FLAGS")+" "+flag+"="+value))
}

// cudaNamedLink makes a stable per-plugin symlink named pjrt_c_api_cuda_plugin.so in the user cache
// folder. Stable, because go-xla caches plugins by path: a new path would load the plugin twice.
func cudaNamedLink(real string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(real))
	dir := filepath.Join(cache, "fastvideo", "pjrt", hex.EncodeToString(sum[:6]))
	link := filepath.Join(dir, "pjrt_c_api_cuda_plugin.so")
	if cur, err := os.Readlink(link); err == nil && cur == real {
		return link, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := link + fmt.Sprintf(".%d", os.Getpid())
	_ = os.Remove(tmp)
	if err := os.Symlink(real, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return link, nil
}

// reXLALibs matches the NVIDIA libraries XLA's GPU runtime dlopens by soname. Others in the same
// folders are left alone: libnvblas and libcufftw interpose BLAS/FFTW symbols when global, the
// profiler and nvshmem transport libraries pull in drivers we do not want.
var reXLALibs = regexp.MustCompile(`^lib(cudart|cublas|cublasLt|cudnn(_[a-z_]+)?|cufft|cusolver|cusparse|nccl|nvrtc|nvrtc-builtins|nvJitLink|cupti)\.so(\.[0-9.]+)?$`)

// preloadCandidates lists the libraries to preload from dirs, one per file name (the first folder wins).
func preloadCandidates(dirs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if seen[n] || !reXLALibs.MatchString(n) {
				continue
			}
			p := filepath.Join(d, n)
			if !isFile(p) {
				continue
			}
			seen[n] = true
			out = append(out, p)
		}
	}
	return out
}

// preloadAll opens every file, retrying the failures after each pass that loaded something:
// a library whose dependency was not loaded yet succeeds once the dependency is in.
func preloadAll(files []string, open func(string) error) (loaded, failed []string) {
	pending := slices.Clone(files)
	errs := map[string]error{}
	for len(pending) > 0 {
		var next []string
		for _, f := range pending {
			if err := open(f); err != nil {
				errs[f] = err
				next = append(next, f)
				continue
			}
			loaded = append(loaded, f)
		}
		if len(next) == len(pending) {
			break
		}
		pending = next
	}
	if len(loaded) < len(files) {
		for _, f := range files {
			if !slices.Contains(loaded, f) {
				failed = append(failed, fmt.Sprintf("%s: %v", f, errs[f]))
			}
		}
	}
	return loaded, failed
}
