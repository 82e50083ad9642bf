package backend

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"fastvideo/internal/compilecache"
)

// System is everything discovery may look at. Tests fake it; DefaultSystem is the real process.
type System struct {
	// LookupEnv reads an environment variable; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Root prefixes the fixed system folders (/usr/lib/python3*, /opt/conda, /usr/local/lib/go-xla...).
	// Paths taken from environment variables are used as they are. "" means "/".
	Root string
	// GOOS selects the platform rules; "" means runtime.GOOS.
	GOOS string
	// PythonSitePackages asks an interpreter for its site folders. It is called only when the
	// file-system scan found no plugin; nil means do not ask.
	PythonSitePackages func() []string
}

// DefaultSystem reads the real process environment and may ask python3 (3 s timeout).
func DefaultSystem() System {
	return System{LookupEnv: os.LookupEnv, PythonSitePackages: askPython}
}

// LibMode says how the CUDA libraries the plugin dlopens are made reachable.
type LibMode string

const (
	LibsNone    LibMode = ""        // go backend, or a platform that needs nothing (metal)
	LibsRPATH   LibMode = "rpath"   // the plugin's own RPATH/RUNPATH reaches LibDirs; nothing to do
	LibsPreload LibMode = "preload" // LibDirs' libraries are dlopened RTLD_GLOBAL before the plugin
	LibsSystem  LibMode = "system"  // nothing found: rely on LD_LIBRARY_PATH / ld.so.cache
)

// Plan is the outcome of discovery: what will be created, and why.
type Plan struct {
	Spec    string // the spec that was resolved, after defaults (e.g. "xla:cuda,tf32=false")
	Source  string // where Spec came from: "argument", "$GOMLX_BACKEND" or "default"
	Backend Kind   // KindGo or KindXLA
	Config  string // what compute.NewWithConfig receives (Open may replace the plugin path by its cuda-named link)
	// MemoryFraction caps XLA's CUDA allocator (the spec's memory_fraction, else DefaultMemoryFraction); set by Open.
	MemoryFraction float64

	Platform    string   // "cuda", "metal", or "" (go backend, explicit plugin path)
	Options     string   // xla options passed through, e.g. "tf32=false"
	Plugin      string   // absolute, symlink-free path of the PJRT plugin
	FoundBy     string   // which rule found Plugin
	LibMode     LibMode  // how the plugin's libraries are reached
	LibDirs     []string // the NVIDIA library folders the plugin uses
	CUDADataDir string   // for --xla_gpu_cuda_data_dir (ptxas, libdevice), when a wheel ships one
	Searched    []string // every place looked at, in order, with what was there
	Notes       []string // anything surprising (other plugins seen, version caveats)

	// CompileCacheDir, set before Open, keeps compiled programs in that folder between processes
	// (internal/compilecache; the GPU build's go-xla loads them, any XLA-on-CUDA run keeps XLA's
	// autotune results there); "" turns it off. CompileCacheWarn receives its problems (none is fatal).
	CompileCacheDir  string
	CompileCacheWarn func(error)
	// FP8GEMMs, set before Open, says the programs will hold float8 GEMMs: Open then turns XLA's Triton
	// GEMMs off on CUDA (unless $XLA_FLAGS names the flag), under which one FP8 joint block of FastH3
	// had not finished compiling after 100 s; with cuBLAS it compiles in about 2.4 s (BENCHMARKS.md).
	FP8GEMMs bool

	// Filled by Open.
	PluginVersion string   // the plugin's Python distribution, "jax-cuda13-plugin 0.11.2" ("" when unknown)
	LoadPath      string   // the path handed to go-xla
	Preloaded     []string // libraries dlopened by Open
	PreloadFailed []string // "path: reason" for libraries that never loaded (the plugin may not need them)
	// CompileCache is the cache Open installed (nil: off, or a backend without the GPU build's hook);
	// CompileCacheNote says what Open did about it.
	CompileCache     *compilecache.Cache
	CompileCacheNote string

	needsCUDAName bool // go-xla recognises CUDA by "cuda" in the path: Open must link it under such a name
}

// Resolve finds what New(spec) would create, without loading anything.
func Resolve(spec string) (*Plan, error) { return ResolveWith(spec, DefaultSystem()) }

// ResolveWith is Resolve against the given System. Rules:
//   - "" uses $GOMLX_BACKEND, else DefaultSpec ("go:ops_sequential"); a bare "go" is go:ops_sequential.
//   - "xla:cuda[,opts]" (alias "cuda", and a bare "xla" on linux) searches, first hit wins:
//     $FASTVIDEO_PJRT_PLUGIN (file, or folder), $PJRT_PLUGIN_LIBRARY_PATH folders, go-xla's install
//     folders, then jax_plugins/xla_cuda*/xla_cuda_plugin.so in the site-packages of $VIRTUAL_ENV,
//     $CONDA_PREFIX, pythons on $PATH, $PYTHONPATH, the user site, pyenv, conda, /opt, system
//     pythons, and last the folders python3 reports.
//   - "xla:metal[,opts]" (darwin) does the same with the jax-metal plugin names.
//   - "xla:/abs/plugin[,opts]" uses that file.
//
// Options after the plugin name pass through to go-xla untouched.
func ResolveWith(spec string, sys System) (*Plan, error) {
	if sys.LookupEnv == nil {
		sys.LookupEnv = os.LookupEnv
	}
	if sys.GOOS == "" {
		sys.GOOS = runtime.GOOS
	}
	p := &Plan{Spec: strings.TrimSpace(spec), Source: "argument"}
	if p.Spec == "" {
		if v, ok := sys.LookupEnv(EnvBackend); ok && strings.TrimSpace(v) != "" {
			p.Spec, p.Source = strings.TrimSpace(v), "$"+EnvBackend
		} else {
			p.Spec, p.Source = DefaultSpec, "default"
		}
	}
	req, err := parseSpec(p.Spec, p.Source, sys.GOOS)
	if err != nil {
		return nil, err
	}
	p.Backend = req.backend
	if req.backend == KindGo {
		p.Config = "go:" + req.goConfig
		return p, nil
	}
	p.Platform, p.Options = req.platform, req.options
	f := &finder{sys: sys, plan: p}
	switch {
	case req.plugin != "":
		err = f.explicit(req.plugin)
	case req.platform == "cuda":
		if sys.GOOS != "linux" {
			return nil, fmt.Errorf("%s: CUDA needs linux, this is %s; use \"go\" or, on darwin, \"xla:metal\"",
				origin(p.Spec, p.Source), sys.GOOS)
		}
		err = f.find(cudaRule)
	case req.platform == "metal":
		if sys.GOOS != "darwin" {
			return nil, fmt.Errorf("%s: Metal needs darwin, this is %s; use \"go\" or, on linux, \"xla:cuda\"",
				origin(p.Spec, p.Source), sys.GOOS)
		}
		err = f.find(metalRule)
	}
	if err != nil {
		return nil, err
	}
	p.Config = xlaConfig(p.Plugin, p.Options)
	if p.IsCUDA() {
		f.arrangeCUDA()
	}
	return p, nil
}

func xlaConfig(plugin, options string) string {
	if options == "" {
		return "xla:" + plugin
	}
	return "xla:" + plugin + "," + options
}

// IsCUDA says whether the plan runs on an NVIDIA GPU: the cuda platform, or a plugin whose path says so.
func (p *Plan) IsCUDA() bool {
	return p.Platform == "cuda" || (p.Platform == "" && looksCUDA(p.Plugin))
}

func looksCUDA(path string) bool {
	u := strings.ToUpper(path)
	return strings.Contains(u, "CUDA") || strings.Contains(u, "NVIDIA")
}

// String says in one paragraph what was chosen and how its libraries are reached.
func (p *Plan) String() string {
	if p == nil {
		return "<nil plan>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (from %s) -> %s", p.Spec, p.Source, p.Backend)
	if p.Backend == KindGo {
		fmt.Fprintf(&b, " config %q", p.Config)
		return b.String()
	}
	fmt.Fprintf(&b, " plugin %s (found by %s)", p.Plugin, p.FoundBy)
	if p.LoadPath != "" && p.LoadPath != p.Plugin {
		fmt.Fprintf(&b, " loaded as %s", p.LoadPath)
	}
	if p.Options != "" {
		fmt.Fprintf(&b, "; options %s", p.Options)
	}
	switch p.LibMode {
	case LibsRPATH:
		fmt.Fprintf(&b, "; CUDA libraries via the plugin's RPATH: %s", strings.Join(p.LibDirs, ", "))
	case LibsPreload:
		fmt.Fprintf(&b, "; CUDA libraries preloaded from: %s", strings.Join(p.LibDirs, ", "))
		if p.Preloaded != nil || p.PreloadFailed != nil {
			fmt.Fprintf(&b, " (%d loaded, %d failed)", len(p.Preloaded), len(p.PreloadFailed))
		}
	case LibsSystem:
		b.WriteString("; CUDA libraries: none found next to the plugin, relying on LD_LIBRARY_PATH/ld.so.cache")
	}
	if p.CUDADataDir != "" {
		fmt.Fprintf(&b, "; --xla_gpu_cuda_data_dir=%s", p.CUDADataDir)
	}
	if p.CompileCacheNote != "" {
		fmt.Fprintf(&b, "; %s", p.CompileCacheNote)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "; note: %s", n)
	}
	return b.String()
}

// rule describes one platform's plugin names.
type rule struct {
	what       string   // "CUDA" / "Metal", for messages
	dirNames   []string // globs tried inside a plugin folder, in order
	wheelGlobs []string // globs tried inside a site-packages folder
	goxlaDirs  func(f *finder) []string
	fix        string
}

var cudaRule = rule{
	what: "CUDA",
	dirNames: []string{"pjrt_c_api_cuda_plugin.so", "pjrt_c_api_cuda*_plugin.so", "pjrt-plugin-cuda*.so",
		"pjrt_plugin_cuda*.so", "xla_cuda_plugin.so"},
	wheelGlobs: []string{"jax_plugins/xla_cuda*/xla_cuda_plugin.so"},
	goxlaDirs: func(f *finder) []string {
		var dirs []string
		if home := f.env("HOME"); home != "" {
			dirs = append(dirs, filepath.Join(home, ".local/lib/go-xla/nvidia"), filepath.Join(home, ".local/lib/go-xla"),
				filepath.Join(home, ".local/lib/gomlx/pjrt"))
		}
		return append(dirs, f.sysPath("/usr/local/lib/go-xla/nvidia"), f.sysPath("/usr/local/lib/go-xla"),
			f.sysPath("/usr/local/lib/gomlx/pjrt"))
	},
	fix: `set ` + EnvPlugin + `=/path/to/xla_cuda_plugin.so (from a JAX CUDA wheel) or to a pjrt_c_api_cuda_plugin.so; ` +
		`or pip install "jax[cuda12]" (or "jax[cuda13]") into a Python environment here and activate it or put its bin/ on PATH; ` +
		`or run on the CPU with GOMLX_BACKEND=go`,
}

var metalRule = rule{
	what: "Metal",
	dirNames: []string{"pjrt_c_api_metal_plugin.dylib", "pjrt_c_api_metal*_plugin.dylib", "pjrt_plugin_metal*.dylib",
		"pjrt-plugin-metal*.dylib", "pjrt_c_api_metal_plugin.so"},
	wheelGlobs: []string{"jax_plugins/metal_plugin/pjrt_plugin_metal*.dylib", "jax_plugins/*metal*/pjrt_plugin_metal*.dylib"},
	goxlaDirs: func(f *finder) []string {
		var dirs []string
		if home := f.env("HOME"); home != "" {
			dirs = append(dirs, filepath.Join(home, "Library/Application Support/go-xla"))
		}
		return append(dirs, f.sysPath("/usr/local/lib/go-xla"))
	},
	fix: `set ` + EnvPlugin + `=/path/to/pjrt_plugin_metal_14.dylib (from the jax-metal wheel); ` +
		`or pip install jax-metal into a Python environment here and activate it or put its bin/ on PATH; ` +
		`or run on the CPU with GOMLX_BACKEND=go`,
}

type finder struct {
	sys     System
	plan    *Plan
	sites   []string        // site-packages folders scanned, in order (also used for fallback NVIDIA libraries)
	scanned map[string]bool // symlink-resolved site folders already scanned
}

func (f *finder) env(k string) string {
	v, _ := f.sys.LookupEnv(k)
	return strings.TrimSpace(v)
}

func (f *finder) sysPath(p string) string {
	if f.sys.Root == "" {
		return p
	}
	return filepath.Join(f.sys.Root, p)
}

func (f *finder) searched(place, result string) {
	f.plan.Searched = append(f.plan.Searched, place+": "+result)
}

func (f *finder) found(path, by string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("PJRT plugin %s (found by %s): %v", path, by, err)
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return fmt.Errorf("PJRT plugin %s (found by %s): %v", path, by, err)
	}
	f.plan.Plugin, f.plan.FoundBy = real, by
	return nil
}

func (f *finder) explicit(path string) error {
	if !isFile(path) {
		return fmt.Errorf("%s: plugin file %s does not exist or is not a file; "+
			"give the absolute path of a PJRT plugin (.so/.dylib) or use \"xla:cuda\" to search for one",
			origin(f.plan.Spec, f.plan.Source), path)
	}
	f.searched("spec", path)
	return f.found(path, "the spec")
}

// find walks the search order: $FASTVIDEO_PJRT_PLUGIN, $PJRT_PLUGIN_LIBRARY_PATH, go-xla's install
// folders, Python site-packages found on disk, then site-packages reported by python3.
func (f *finder) find(r rule) error {
	if v := f.env(EnvPlugin); v != "" {
		return f.fromPluginVariable(r, v)
	}
	f.searched("$"+EnvPlugin, "not set")
	for _, step := range []func(rule) (bool, error){f.fromPluginPath, f.fromGoXLAFolders, f.fromSitesOnDisk, f.fromPythonReport} {
		if ok, err := step(r); ok || err != nil {
			return err
		}
	}
	return f.notFound(r)
}

// fromPluginVariable takes $FASTVIDEO_PJRT_PLUGIN (a file, or a folder holding one).
func (f *finder) fromPluginVariable(r rule, v string) error {
	if isFile(v) {
		f.searched("$"+EnvPlugin, v)
		return f.found(v, "$"+EnvPlugin)
	}
	if isDir(v) {
		if p := firstMatch(v, r.dirNames); p != "" {
			f.searched("$"+EnvPlugin, p)
			return f.found(p, "$"+EnvPlugin)
		}
	}
	// An explicit choice that is wrong must not be silently replaced by another plugin.
	return fmt.Errorf("$%s=%q: no such plugin file (nor a folder holding %s); point it at the %s PJRT plugin file or unset it to search",
		EnvPlugin, v, strings.Join(r.dirNames, ", "), r.what)
}

// fromPluginPath looks through go-xla's $PJRT_PLUGIN_LIBRARY_PATH entries.
func (f *finder) fromPluginPath(r rule) (bool, error) {
	v, ok := f.sys.LookupEnv(EnvPluginPath)
	if !ok || v == "" {
		f.searched("$"+EnvPluginPath, "not set")
		return false, nil
	}
	for _, d := range strings.Split(v, ":") {
		if d == "" {
			continue
		}
		if isFile(d) && matchesAny(filepath.Base(d), r.dirNames) {
			f.searched("$"+EnvPluginPath+" entry "+d, "found")
			return true, f.found(d, "$"+EnvPluginPath)
		}
		if p := firstMatch(d, r.dirNames); p != "" {
			f.searched("$"+EnvPluginPath+" entry "+d, "found "+filepath.Base(p))
			return true, f.found(p, "$"+EnvPluginPath)
		}
		f.searched("$"+EnvPluginPath+" entry "+d, "no "+strings.Join(r.dirNames, ", "))
	}
	return false, nil
}

// fromGoXLAFolders looks in the folders go-xla's installer writes to.
func (f *finder) fromGoXLAFolders(r rule) (bool, error) {
	for _, d := range r.goxlaDirs(f) {
		if p := firstMatch(d, r.dirNames); p != "" {
			f.searched("go-xla folder "+d, "found "+filepath.Base(p))
			return true, f.found(p, "go-xla install folder "+d)
		}
		f.searched("go-xla folder "+d, absentOr(d, "no plugin"))
	}
	return false, nil
}

// fromSitesOnDisk scans the site-packages of the Python environments found on disk.
func (f *finder) fromSitesOnDisk(r rule) (bool, error) {
	for _, c := range f.siteCandidates() {
		sites := globDirs(c.patterns())
		if len(sites) == 0 {
			f.searched(c.shown()+" ("+c.how+")", "no such folder")
			continue
		}
		if ok, err := f.scanSites(r, sites, c.how); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// fromPythonReport scans the site folders python3 reports, when asking it is allowed.
func (f *finder) fromPythonReport(r rule) (bool, error) {
	if f.sys.PythonSitePackages == nil {
		return false, nil
	}
	sites := f.sys.PythonSitePackages()
	if len(sites) == 0 {
		f.searched("python3 site.getsitepackages()", "no python3 on PATH or it failed")
		return false, nil
	}
	if ok, err := f.scanSites(r, sites, "reported by python3"); ok || err != nil {
		return ok, err
	}
	f.searched("python3 site.getsitepackages()", "nothing new: "+strings.Join(sites, ", "))
	return false, nil
}

// scanSites looks for the rule's wheel plugin in each site folder not scanned before.
func (f *finder) scanSites(r rule, sites []string, how string) (bool, error) {
	for _, s := range sites {
		key := s
		if real, err := filepath.EvalSymlinks(s); err == nil {
			key = real
		}
		if f.scanned[key] || !isDir(s) {
			continue
		}
		if f.scanned == nil {
			f.scanned = map[string]bool{}
		}
		f.scanned[key] = true
		f.sites = append(f.sites, s)
		hits := wheelPlugins(s, r.wheelGlobs)
		if len(hits) == 0 {
			f.searched("site-packages "+s+" ("+how+")", "no "+strings.Join(r.wheelGlobs, ", "))
			continue
		}
		f.searched("site-packages "+s+" ("+how+")", "found "+strings.TrimPrefix(hits[0], s+string(filepath.Separator)))
		if len(hits) > 1 {
			f.plan.Notes = append(f.plan.Notes, fmt.Sprintf("also present, not used: %s", strings.Join(hits[1:], ", ")))
		}
		return true, f.found(hits[0], "JAX wheel in "+s+" ("+how+")")
	}
	return false, nil
}

// wheelPlugins lists the plugin files matching the globs inside a site folder, sorted.
func wheelPlugins(site string, globs []string) []string {
	var hits []string
	for _, g := range globs {
		m, _ := filepath.Glob(filepath.Join(site, g))
		for _, x := range m {
			if isFile(x) && !slices.Contains(hits, x) {
				hits = append(hits, x)
			}
		}
	}
	slices.Sort(hits)
	return hits
}

func (f *finder) notFound(r rule) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: no %s PJRT plugin found. Searched, in order:\n", origin(f.plan.Spec, f.plan.Source), r.what)
	for _, s := range f.plan.Searched {
		fmt.Fprintf(&b, "  - %s\n", s)
	}
	fmt.Fprintf(&b, "Fix: %s.", r.fix)
	return fmt.Errorf("%s", b.String())
}

// siteCandidate is one source of Python environments: interpreter prefixes (searched under
// {lib,lib64,local/lib}/python3*/{site,dist}-packages) and site folders given directly.
type siteCandidate struct {
	how      string
	prefixes []string
	direct   []string
}

func (c siteCandidate) patterns() []string {
	var out []string
	for _, p := range c.prefixes {
		out = append(out, sitesUnder(p)...)
	}
	return append(out, c.direct...)
}

func (c siteCandidate) shown() string {
	var parts []string
	if len(c.prefixes) > 0 {
		parts = append(parts, strings.Join(c.prefixes, ", ")+" under {lib,lib64,local/lib}/python3*/{site,dist}-packages")
	}
	return strings.Join(append(parts, c.direct...), ", ")
}

// sitesUnder lists where an interpreter installed under prefix keeps its packages
// (CPython, Debian's dist-packages, Fedora's lib64).
func sitesUnder(prefix string) []string {
	return []string{
		filepath.Join(prefix, "lib/python3*/site-packages"),
		filepath.Join(prefix, "lib/python3*/dist-packages"),
		filepath.Join(prefix, "lib/python3/dist-packages"),
		filepath.Join(prefix, "lib64/python3*/site-packages"),
		filepath.Join(prefix, "local/lib/python3*/dist-packages"),
		filepath.Join(prefix, "local/lib/python3*/site-packages"),
	}
}

// siteCandidates lists Python environments from the most specific (the active one) to the most
// general (system interpreters).
func (f *finder) siteCandidates() []siteCandidate {
	var cs []siteCandidate
	if v := f.env("VIRTUAL_ENV"); v != "" {
		cs = append(cs, siteCandidate{how: "$VIRTUAL_ENV", prefixes: []string{v}})
	}
	if v := f.env("CONDA_PREFIX"); v != "" {
		cs = append(cs, siteCandidate{how: "$CONDA_PREFIX", prefixes: []string{v}})
	}
	// A python on PATH names its environment without running it: <prefix>/bin/python3.
	for _, d := range filepath.SplitList(f.env("PATH")) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		for _, exe := range []string{"python3", "python"} {
			p := filepath.Join(d, exe)
			if !isFile(p) {
				continue
			}
			cs = append(cs, siteCandidate{how: p + " on $PATH", prefixes: []string{filepath.Dir(d)}})
			if real, err := filepath.EvalSymlinks(p); err == nil && filepath.Dir(filepath.Dir(real)) != filepath.Dir(d) {
				cs = append(cs, siteCandidate{how: p + " -> " + real, prefixes: []string{filepath.Dir(filepath.Dir(real))}})
			}
		}
	}
	if v := f.env("PYTHONPATH"); v != "" {
		cs = append(cs, siteCandidate{how: "$PYTHONPATH", direct: filepath.SplitList(v)})
	}
	home := f.env("HOME")
	if home != "" {
		cs = append(cs, siteCandidate{how: "user site", direct: []string{
			filepath.Join(home, ".local/lib/python3*/site-packages"),
			filepath.Join(home, "Library/Python/3*/lib/python/site-packages"),
		}})
	}
	pyenv := f.env("PYENV_ROOT")
	if pyenv == "" && home != "" {
		pyenv = filepath.Join(home, ".pyenv")
	}
	if pyenv != "" {
		cs = append(cs, siteCandidate{how: "pyenv", prefixes: []string{
			filepath.Join(pyenv, "versions/*"), filepath.Join(pyenv, "versions/*/envs/*")}})
	}
	var conda []string
	if home != "" {
		for _, c := range []string{"miniconda3", "anaconda3", "miniforge3", "mambaforge"} {
			conda = append(conda, filepath.Join(home, c), filepath.Join(home, c, "envs/*"))
		}
	}
	conda = append(conda, f.sysPath("/opt/conda"), f.sysPath("/opt/conda/envs/*"))
	cs = append(cs, siteCandidate{how: "conda", prefixes: conda})
	cs = append(cs, siteCandidate{how: "/opt environments", prefixes: []string{
		f.sysPath("/opt/*"), f.sysPath("/opt/*/.venv"), f.sysPath("/opt/*/venv")}})
	sys := siteCandidate{how: "system", prefixes: []string{f.sysPath("/usr/local"), f.sysPath("/usr")}}
	if f.sys.GOOS == "darwin" {
		sys.prefixes = append(sys.prefixes, f.sysPath("/opt/homebrew"))
		sys.direct = append(sys.direct, f.sysPath("/Library/Frameworks/Python.framework/Versions/3*/lib/python3*/site-packages"))
	}
	return append(cs, sys)
}

// askPython runs the first python3 on PATH for its site folders; a missing or slow python is no error.
func askPython() []string {
	exe, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "-c",
		"import site\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)").Output()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			dirs = append(dirs, l)
		}
	}
	return dirs
}

// arrangeCUDA decides how the plugin will reach cuBLAS, cuDNN, cudart... (see LibMode).
func (f *finder) arrangeCUDA() {
	p := f.plan
	p.needsCUDAName = !looksCUDA(p.Plugin)
	pdir := filepath.Dir(p.Plugin)
	rpathDirs := elfSearchDirs(p.Plugin)
	var near []string
	for _, up := range []string{".", "..", "../.."} {
		near = appendNew(near, globDirs([]string{filepath.Join(pdir, up, "nvidia/*/lib")})...)
	}
	var fromSite []string
	var fromSiteDir string
	if len(near) == 0 {
		if len(f.sites) == 0 {
			// Found by a variable or go-xla folder: no site-packages scanned yet.
			for _, c := range f.siteCandidates() {
				f.sites = appendNew(f.sites, globDirs(c.patterns())...)
			}
		}
		for _, s := range f.sites {
			if d := globDirs([]string{filepath.Join(s, "nvidia/*/lib")}); len(d) > 0 {
				fromSite, fromSiteDir = d, s
				break
			}
		}
	}
	force, _ := f.sys.LookupEnv(EnvPreload)
	force = strings.TrimSpace(force)
	switch {
	case force != "1" && len(rpathDirs) > 0 && !p.needsCUDAName:
		p.LibMode, p.LibDirs = LibsRPATH, rpathDirs
	case force == "0":
		p.LibMode = LibsSystem
		if len(rpathDirs) > 0 {
			p.LibMode, p.LibDirs = LibsRPATH, rpathDirs
		}
	case len(rpathDirs) > 0:
		p.LibMode, p.LibDirs = LibsPreload, rpathDirs
	case len(near) > 0:
		p.LibMode, p.LibDirs = LibsPreload, near
	case len(fromSite) > 0:
		p.LibMode, p.LibDirs = LibsPreload, fromSite
		p.Notes = append(p.Notes, fmt.Sprintf("no NVIDIA libraries next to the plugin; using those of %s, "+
			"whose versions may not match the plugin", fromSiteDir))
	default:
		p.LibMode = LibsSystem
	}
	if force == "1" {
		p.Notes = append(p.Notes, "$"+EnvPreload+"=1 forces preloading")
	}
	// The wheel layout puts ptxas and libdevice in nvidia/cuda_nvcc (CUDA 12) or nvidia/cu13.
	for _, up := range []string{"..", "../.."} {
		for _, d := range globDirs([]string{filepath.Join(pdir, up, "nvidia/*")}) {
			if isDir(filepath.Join(d, "nvvm/libdevice")) {
				p.CUDADataDir = d
				return
			}
		}
	}
}

// elfSearchDirs returns the plugin's RPATH/RUNPATH folders that exist, $ORIGIN expanded.
// A file that is not ELF (a fake in tests, a Mach-O) yields none.
func elfSearchDirs(path string) []string {
	entries, err := readELFSearchPath(path)
	if err != nil {
		return nil
	}
	origin := filepath.Dir(path)
	var dirs []string
	for _, e := range entries {
		e = strings.ReplaceAll(strings.ReplaceAll(e, "${ORIGIN}", origin), "$ORIGIN", origin)
		if strings.Contains(e, "$") || !filepath.IsAbs(e) {
			continue
		}
		if isDir(e) {
			dirs = appendNew(dirs, filepath.Clean(e))
		}
	}
	return dirs
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func absentOr(dir, msg string) string {
	if !isDir(dir) {
		return "no such folder"
	}
	return msg
}

// firstMatch returns the first file in dir matching the globs, in glob order.
func firstMatch(dir string, globs []string) string {
	if !isDir(dir) {
		return ""
	}
	for _, g := range globs {
		m, _ := filepath.Glob(filepath.Join(dir, g))
		slices.Sort(m)
		for _, x := range m {
			if isFile(x) {
				return x
			}
		}
	}
	return ""
}

func matchesAny(name string, globs []string) bool {
	for _, g := range globs {
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
	}
	return false
}

// globDirs expands the patterns to existing folders, keeping pattern order, sorted within a pattern.
func globDirs(patterns []string) []string {
	var out []string
	for _, pat := range patterns {
		m, _ := filepath.Glob(pat)
		slices.Sort(m)
		for _, d := range m {
			if isDir(d) {
				out = appendNew(out, filepath.Clean(d))
			}
		}
	}
	return out
}

// MemoryStats returns the reader of the plan's accelerator memory (NVIDIA GPUs, through the
// driver's management library, device 0): the bytes in use on the device and the most this
// process can use, the device's memory capped by the allocator's memory fraction. Nil where there
// is none to read; call it after Open (which settles the fraction).
func (p *Plan) MemoryStats() func() (used, limit uint64, err error) {
	if p.Backend != KindXLA || !p.IsCUDA() {
		return nil
	}
	if _, _, err := NVIDIAMemory(0); err != nil {
		return nil
	}
	fraction := p.MemoryFraction
	if fraction <= 0 || fraction > 1 {
		fraction = 1
	}
	return func() (uint64, uint64, error) {
		used, total, err := NVIDIAMemory(0)
		return used, uint64(float64(total) * fraction), err
	}
}
