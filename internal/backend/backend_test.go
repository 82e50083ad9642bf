package backend

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// fakeSys is a System over a temporary tree with only the given variables set.
func fakeSys(root, goos string, env map[string]string) System {
	return System{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Root:      root,
		GOOS:      goos,
	}
}

// touch creates a file (and its folders) under root and returns its path.
func touch(t *testing.T, root, rel string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("not an ELF file"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkdir(t *testing.T, root, rel string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGoSpecs(t *testing.T) {
	cases := []struct {
		spec, envBackend string
		wantConfig       string
		wantSource       string
	}{
		{"", "", "go:ops_sequential", "default"},
		{"", "go:parallelism=-1", "go:parallelism=-1", "$GOMLX_BACKEND"},
		{"go", "xla:cuda", "go:ops_sequential", "argument"},
		{" GO ", "", "go:ops_sequential", "argument"},
		{"go:creation_order", "", "go:creation_order", "argument"},
		{"go,parallelism=1", "", "go:parallelism=1", "argument"},
		{"", "go", "go:ops_sequential", "$GOMLX_BACKEND"},
	}
	for _, c := range cases {
		env := map[string]string{}
		if c.envBackend != "" {
			env[EnvBackend] = c.envBackend
		}
		p, err := ResolveWith(c.spec, fakeSys(t.TempDir(), "linux", env))
		if err != nil {
			t.Fatalf("spec %q env %q: %v", c.spec, c.envBackend, err)
		}
		if p.Backend != KindGo || p.Config != c.wantConfig || p.Source != c.wantSource {
			t.Errorf("spec %q env %q: got backend %q config %q source %q, want go %q %q",
				c.spec, c.envBackend, p.Backend, p.Config, p.Source, c.wantConfig, c.wantSource)
		}
	}
}

// TestDefaultRunsGraph opens the default backend and runs a matmul on it.
func TestDefaultRunsGraph(t *testing.T) {
	p, err := ResolveWith("", fakeSys(t.TempDir(), "linux", nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	if fmt.Sprint(b) != "go" {
		t.Fatalf("default backend is %q (%s), want go", fmt.Sprint(b), b.Name())
	}
	t.Logf("plan: %s; backend: %s", p, b.Description())
	got := runMatmul(t, b)
	want := []float32{19, 22, 43, 50}
	if !slices.Equal(got, want) {
		t.Fatalf("matmul = %v, want %v", got, want)
	}
}

// runMatmul runs [[1,2],[3,4]]·[[5,6],[7,8]] on b; a panic in graph code fails the test.
func runMatmul(t *testing.T, b compute.Backend) []float32 {
	t.Helper()
	exec, err := graph.NewExec(b, func(x, y *graph.Node) *graph.Node { return graph.MatMul(x, y) })
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Call1([][]float32{{1, 2}, {3, 4}}, [][]float32{{5, 6}, {7, 8}})
	if err != nil {
		t.Fatal(err)
	}
	vals, err := tensors.CopyFlatData[float32](out)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

func TestUnknownSpecs(t *testing.T) {
	root := t.TempDir()
	for _, spec := range []string{"tpu", "gpu", "xla:cpu", "xla:rocm", "torch:cuda"} {
		_, err := ResolveWith(spec, fakeSys(root, "linux", nil))
		if err == nil || !strings.Contains(err.Error(), "allowed specs") || !strings.Contains(err.Error(), `"xla:cuda[,options]"`) {
			t.Errorf("spec %q: want an error listing the allowed specs, got %v", spec, err)
		}
	}
	_, err := ResolveWith("", fakeSys(root, "linux", map[string]string{EnvBackend: "xla:cpu"}))
	if err == nil || !strings.Contains(err.Error(), `$GOMLX_BACKEND="xla:cpu"`) {
		t.Errorf("GOMLX_BACKEND=xla:cpu: want an error naming the variable and its value, got %v", err)
	}
	_, err = ResolveWith("", fakeSys(root, "linux", map[string]string{EnvBackend: "bogus"}))
	if err == nil || !strings.HasPrefix(err.Error(), `$GOMLX_BACKEND="bogus" is not known: use "go", "go:ops_sequential", "xla:cuda" or "xla:metal"`) {
		t.Errorf("GOMLX_BACKEND=bogus: want the variable, its value and the allowed specs first, got %v", err)
	}
	_, err = ResolveWith("bogus", fakeSys(root, "linux", nil))
	if err == nil || !strings.HasPrefix(err.Error(), `backend "bogus" is not known: use "go", "go:ops_sequential", "xla:cuda" or "xla:metal"`) {
		t.Errorf("spec bogus: want the value and the allowed specs first, got %v", err)
	}
	missing := filepath.Join(root, "nope", "plugin.so")
	if _, err := ResolveWith("xla:"+missing, fakeSys(root, "linux", nil)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing explicit plugin: got %v", err)
	}
	if _, err := ResolveWith("metal", fakeSys(root, "linux", nil)); err == nil || !strings.Contains(err.Error(), "darwin") {
		t.Errorf("metal on linux: got %v", err)
	}
	if _, err := ResolveWith("xla:cuda", fakeSys(root, "darwin", nil)); err == nil || !strings.Contains(err.Error(), "linux") {
		t.Errorf("cuda on darwin: got %v", err)
	}
}

// TestCUDAPrecedence puts a plugin at every searched place and removes the winner each round.
func TestCUDAPrecedence(t *testing.T) {
	root := t.TempDir()
	home := mkdir(t, root, "home/u")
	custom := touch(t, root, "custom/my_cuda_plugin.so")
	pjrtDir := filepath.Join(root, "pjrtdir")
	pjrt := touch(t, root, "pjrtdir/pjrt_c_api_cuda_plugin.so")
	goxla := touch(t, home, ".local/lib/go-xla/nvidia/pjrt_c_api_cuda_plugin.so")
	venv := filepath.Join(root, "venv")
	venvPlugin := touch(t, venv, "lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	pathEnv := filepath.Join(root, "penv")
	touch(t, pathEnv, "bin/python3")
	pathPlugin := touch(t, pathEnv, "lib/python3.11/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so")
	sysPlugin := touch(t, root, "usr/lib/python3/dist-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	reported := filepath.Join(root, "reported/site-packages")
	reportedPlugin := touch(t, reported, "jax_plugins/xla_cuda12/xla_cuda_plugin.so")

	env := map[string]string{
		EnvPlugin:     custom,
		EnvPluginPath: filepath.Join(root, "empty") + ":" + pjrtDir,
		"HOME":        home,
		"VIRTUAL_ENV": venv,
		"PATH":        filepath.Join(pathEnv, "bin"),
	}
	sys := fakeSys(root, "linux", env)
	sys.PythonSitePackages = func() []string { return []string{reported} }

	steps := []struct {
		want, foundBy string
		remove        func()
	}{
		{custom, "$FASTVIDEO_PJRT_PLUGIN", func() { delete(env, EnvPlugin) }},
		{pjrt, "$PJRT_PLUGIN_LIBRARY_PATH", func() { delete(env, EnvPluginPath) }},
		{goxla, "go-xla install folder", func() { os.Remove(goxla) }},
		{venvPlugin, "($VIRTUAL_ENV)", func() { delete(env, "VIRTUAL_ENV") }},
		{pathPlugin, "python3 on $PATH", func() { delete(env, "PATH") }},
		{sysPlugin, "(system)", func() { os.Remove(sysPlugin) }},
		{reportedPlugin, "reported by python3", nil},
	}
	for i, s := range steps {
		p, err := ResolveWith("xla:cuda", sys)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if p.Plugin != s.want || !strings.Contains(p.FoundBy, s.foundBy) {
			t.Fatalf("step %d: got plugin %s found by %q, want %s found by %q\nsearched:\n%s",
				i, p.Plugin, p.FoundBy, s.want, s.foundBy, strings.Join(p.Searched, "\n"))
		}
		if p.Config != "xla:"+s.want {
			t.Errorf("step %d: config %q", i, p.Config)
		}
		if s.remove != nil {
			s.remove()
		}
	}
	sys.PythonSitePackages = nil
	if _, err := ResolveWith("xla:cuda", sys); err == nil {
		t.Fatal("with every plugin removed: want an error")
	}
}

func TestCUDANotFoundListsEverything(t *testing.T) {
	root := t.TempDir()
	home := mkdir(t, root, "home/u")
	mkdir(t, root, "usr/lib/python3/dist-packages") // exists, holds no plugin
	env := map[string]string{
		EnvPluginPath: filepath.Join(root, "a") + ":" + filepath.Join(root, "b"),
		"HOME":        home,
		"VIRTUAL_ENV": filepath.Join(root, "gone-venv"),
	}
	sys := fakeSys(root, "linux", env)
	sys.PythonSitePackages = func() []string { return nil }
	_, err := ResolveWith("", fakeSysWith(sys, EnvBackend, "xla:cuda"))
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	t.Logf("the error:\n%s", msg)
	for _, want := range []string{
		`$GOMLX_BACKEND="xla:cuda": no CUDA PJRT plugin found`,
		"$FASTVIDEO_PJRT_PLUGIN: not set",
		"$PJRT_PLUGIN_LIBRARY_PATH entry " + filepath.Join(root, "a"),
		"$PJRT_PLUGIN_LIBRARY_PATH entry " + filepath.Join(root, "b"),
		"go-xla folder " + filepath.Join(home, ".local/lib/go-xla"),
		"go-xla folder " + filepath.Join(root, "usr/local/lib/go-xla"),
		filepath.Join(root, "gone-venv") + " under {lib,lib64,local/lib}/python3*/{site,dist}-packages ($VIRTUAL_ENV): no such folder",
		filepath.Join(home, ".local/lib/python3*/site-packages"),
		filepath.Join(root, "opt/conda/envs/*"),
		"site-packages " + filepath.Join(root, "usr/lib/python3/dist-packages") + " (system): no jax_plugins/xla_cuda*/xla_cuda_plugin.so",
		"python3 site.getsitepackages(): no python3 on PATH",
		"FASTVIDEO_PJRT_PLUGIN=/path/to/xla_cuda_plugin.so",
		`pip install "jax[cuda12]"`,
		"GOMLX_BACKEND=go",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if n := strings.Count(msg, "\n  - "); n < 12 {
		t.Errorf("error lists %d places, want every one of them", n)
	}
}

func fakeSysWith(sys System, k, v string) System {
	inner := sys.LookupEnv
	sys.LookupEnv = func(key string) (string, bool) {
		if key == k {
			return v, true
		}
		return inner(key)
	}
	return sys
}

// An explicit FASTVIDEO_PJRT_PLUGIN that is wrong must fail, not fall back to another plugin.
func TestExplicitPluginVariableMissing(t *testing.T) {
	root := t.TempDir()
	touch(t, root, "pjrtdir/pjrt_c_api_cuda_plugin.so")
	bad := filepath.Join(root, "typo/xla_cuda_plugin.so")
	_, err := ResolveWith("xla:cuda", fakeSys(root, "linux", map[string]string{
		EnvPlugin: bad, EnvPluginPath: filepath.Join(root, "pjrtdir"),
	}))
	if err == nil || !strings.Contains(err.Error(), EnvPlugin) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("got %v", err)
	}
}

func TestOptionsAndAliases(t *testing.T) {
	root := t.TempDir()
	plugin := touch(t, root, "pjrt/pjrt_c_api_cuda_plugin.so")
	sys := fakeSys(root, "linux", map[string]string{EnvPluginPath: filepath.Join(root, "pjrt")})
	for spec, want := range map[string]string{
		"xla:cuda,tf32=false,preallocate=true": "xla:" + plugin + ",tf32=false,preallocate=true",
		"cuda,tf32=false":                      "xla:" + plugin + ",tf32=false",
		"xla":                                  "xla:" + plugin,
		"CUDA":                                 "xla:" + plugin,
		"xla:" + plugin + ",tf32=false":        "xla:" + plugin + ",tf32=false",
	} {
		p, err := ResolveWith(spec, sys)
		if err != nil {
			t.Fatalf("%q: %v", spec, err)
		}
		if p.Config != want {
			t.Errorf("%q: config %q, want %q", spec, p.Config, want)
		}
	}
}

// TestWheelLayoutWithoutRPATH: a plugin that is not ELF has no RPATH, so the wheel's
// nvidia/*/lib folders are preloaded; the symlinked-plugin recipe resolves to the real file.
func TestWheelLayoutWithoutRPATH(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "venv/lib/python3.12/site-packages")
	real := touch(t, site, "jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	touch(t, site, "nvidia/cublas/lib/libcublas.so.12")
	touch(t, site, "nvidia/cudnn/lib/libcudnn.so.9")
	mkdir(t, site, "nvidia/cuda_nvcc/nvvm/libdevice")
	link := filepath.Join(mkdir(t, root, "home/u/pjrt"), "pjrt_c_api_cuda_plugin.so")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	p, err := ResolveWith("xla:cuda", fakeSys(root, "linux", map[string]string{EnvPluginPath: filepath.Dir(link)}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: %s", p)
	wantDirs := []string{filepath.Join(site, "nvidia/cublas/lib"), filepath.Join(site, "nvidia/cudnn/lib")}
	if p.Plugin != real || p.LibMode != LibsPreload || !slices.Equal(p.LibDirs, wantDirs) {
		t.Fatalf("got plugin %s mode %q dirs %v, want %s preload %v", p.Plugin, p.LibMode, p.LibDirs, real, wantDirs)
	}
	if p.CUDADataDir != filepath.Join(site, "nvidia/cuda_nvcc") {
		t.Errorf("cuda data dir %q", p.CUDADataDir)
	}
	p, err = ResolveWith("xla:cuda", fakeSys(root, "linux", map[string]string{EnvPluginPath: filepath.Dir(link), EnvPreload: "0"}))
	if err != nil || p.LibMode != LibsSystem {
		t.Fatalf("%s=0: got %v, %v", EnvPreload, p, err)
	}
}

// A plugin whose path lacks "cuda", with no NVIDIA folders next to it, borrows a scanned wheel's
// libraries and must be linked under a cuda name.
func TestRenamedPluginBorrowsSiteLibraries(t *testing.T) {
	root := t.TempDir()
	plugin := touch(t, root, "builds/libpjrt_gpu.so")
	venv := filepath.Join(root, "venv")
	site := filepath.Join(venv, "lib/python3.12/site-packages")
	touch(t, site, "nvidia/cu13/lib/libcublas.so.13")
	p, err := ResolveWith("xla:cuda", fakeSys(root, "linux", map[string]string{EnvPlugin: plugin, "VIRTUAL_ENV": venv}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: %s", p)
	if !p.needsCUDAName || p.LibMode != LibsPreload || !slices.Equal(p.LibDirs, []string{filepath.Join(site, "nvidia/cu13/lib")}) {
		t.Fatalf("got needsCUDAName %v mode %q dirs %v", p.needsCUDAName, p.LibMode, p.LibDirs)
	}
	if len(p.Notes) == 0 || !strings.Contains(p.Notes[0], "may not match") {
		t.Errorf("notes %q should warn about borrowed libraries", p.Notes)
	}
}

func TestMetalDiscovery(t *testing.T) {
	root := t.TempDir()
	venv := filepath.Join(root, "venv")
	plugin := touch(t, venv, "lib/python3.11/site-packages/jax_plugins/metal_plugin/pjrt_plugin_metal_14.dylib")
	p, err := ResolveWith("xla:metal,preallocate=false", fakeSys(root, "darwin", map[string]string{"VIRTUAL_ENV": venv}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Plugin != plugin || p.Config != "xla:"+plugin+",preallocate=false" || p.LibMode != LibsNone {
		t.Fatalf("got %s", p)
	}
	// On darwin a bare "xla" means Metal.
	if p, err = ResolveWith("xla", fakeSys(root, "darwin", map[string]string{"VIRTUAL_ENV": venv})); err != nil || p.Plugin != plugin {
		t.Fatalf("bare xla on darwin: %v %v", p, err)
	}
	_, err = ResolveWith("metal", fakeSys(root, "darwin", nil))
	if err == nil || !strings.Contains(err.Error(), "pip install jax-metal") {
		t.Fatalf("no metal plugin: got %v", err)
	}
}

func TestPreloadCandidates(t *testing.T) {
	root := t.TempDir()
	var want []string
	for _, n := range []string{"libcublas.so.12", "libcublasLt.so.12", "libcudnn.so.9", "libcudnn_graph.so.9",
		"libcudnn_engines_precompiled.so.9", "libnvrtc-builtins.so.13.0", "libnvJitLink.so.13", "libcudart.so.13"} {
		want = append(want, touch(t, root, "a/"+n))
	}
	for _, n := range []string{"libnvblas.so.12", "libcufftw.so.11", "libnvrtc.alt.so.13", "libcudart_static.a",
		"nvshmem_bootstrap_uid.so.3", "libnvperf_host.so", "libcusparseLt.so.0"} {
		touch(t, root, "a/"+n)
	}
	touch(t, root, "b/libcublas.so.12") // same name in a later folder: the first wins
	got := preloadCandidates([]string{filepath.Join(root, "a"), filepath.Join(root, "b")})
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestPreloadAllRetriesUntilNoProgress(t *testing.T) {
	loaded := map[string]bool{}
	deps := map[string]string{"a": "b", "b": "c"} // a needs b needs c
	open := func(f string) error {
		if f == "broken" {
			return errors.New("missing libfoo.so")
		}
		if d := deps[f]; d != "" && !loaded[d] {
			return errors.New("needs " + d)
		}
		loaded[f] = true
		return nil
	}
	ok, failed := preloadAll([]string{"a", "b", "broken", "c"}, open)
	if !slices.Equal(ok, []string{"c", "b", "a"}) {
		t.Errorf("loaded %v, want [c b a]", ok)
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "broken: missing libfoo.so") {
		t.Errorf("failed %v", failed)
	}
}

// buildSO compiles a shared object with the C compiler, or skips the test.
func buildSO(t *testing.T, out, src string, args ...string) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	c := filepath.Join(t.TempDir(), "x.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cc, append([]string{"-shared", "-fPIC", "-o", out, c}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
}

// TestWheelLayoutWithRPATH: a plugin whose RPATH reaches the wheel's folders needs nothing.
func TestWheelLayoutWithRPATH(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "venv/lib/python3.12/site-packages")
	plugin := filepath.Join(site, "jax_plugins/xla_cuda13/xla_cuda_plugin.so")
	buildSO(t, plugin, "int GetPjrtApi(void){return 0;}\n",
		"-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib:$ORIGIN/../nvidia/cu13/lib:$ORIGIN/../../nvidia/nccl/lib:/nonexistent")
	touch(t, site, "nvidia/cu13/lib/libcublas.so.13")
	touch(t, site, "nvidia/nccl/lib/libnccl.so.2")
	touch(t, site, "nvidia/nvshmem/lib/libnvshmem_host.so.3")
	sys := fakeSys(root, "linux", map[string]string{"VIRTUAL_ENV": filepath.Join(root, "venv")})
	p, err := ResolveWith("xla:cuda", sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: %s", p)
	want := []string{filepath.Join(site, "nvidia/cu13/lib"), filepath.Join(site, "nvidia/nccl/lib")}
	if p.LibMode != LibsRPATH || !slices.Equal(p.LibDirs, want) {
		t.Fatalf("got mode %q dirs %v, want rpath %v", p.LibMode, p.LibDirs, want)
	}
	p, err = ResolveWith("xla:cuda", fakeSysWith(sys, EnvPreload, "1"))
	if err != nil || p.LibMode != LibsPreload || !slices.Equal(p.LibDirs, want) {
		t.Fatalf("%s=1: got %v, %v", EnvPreload, p, err)
	}
}

// TestPreloadRealDlopen loads a library whose dependency comes later in the list and is on no
// search path: only the retry makes it load.
func TestPreloadRealDlopen(t *testing.T) {
	if err := dlopenGlobal("/nonexistent/libx.so"); err == nil {
		t.Fatal("dlopen of a missing file succeeded")
	} else if strings.Contains(err.Error(), "needs a linux build with cgo") {
		t.Skip(err)
	}
	dir := t.TempDir()
	dep := filepath.Join(dir, "libfvdep.so")
	user := filepath.Join(dir, "libfvuser.so")
	buildSO(t, dep, "int fv_dep(void){return 41;}\n", "-Wl,-soname,libfvdep.so")
	buildSO(t, user, "int fv_dep(void);\nint fv_user(void){return fv_dep()+1;}\n", "-L"+dir, "-lfvdep")
	loaded, failed := preloadAll([]string{user, dep}, dlopenGlobal)
	if !slices.Equal(loaded, []string{dep, user}) || len(failed) != 0 {
		t.Fatalf("loaded %v failed %v", loaded, failed)
	}
}

// TestCUDAOptions: the memory fraction is defaulted unless given, and reported.
func TestCUDAOptions(t *testing.T) {
	for _, c := range []struct {
		in, want string
		fraction float64
	}{
		{"", "memory_fraction=" + DefaultMemoryFraction, 0.92},
		{"tf32=false", "tf32=false,memory_fraction=" + DefaultMemoryFraction, 0.92},
		{"memory_fraction=0.5,tf32=false", "memory_fraction=0.5,tf32=false", 0.5},
	} {
		got, f, err := cudaOptions(c.in)
		if err != nil || got != c.want || f != c.fraction {
			t.Errorf("cudaOptions(%q) = %q, %g, %v; want %q, %g", c.in, got, f, err, c.want, c.fraction)
		}
	}
	for _, bad := range []string{"memory_fraction=2", "memory_fraction=lots"} {
		if _, _, err := cudaOptions(bad); err == nil {
			t.Errorf("cudaOptions(%q) accepted", bad)
		}
	}
}

// TestParseMemAvailable: the memory policy's host figure is MemAvailable in bytes; a missing or
// absurd line is an error, never a guess.
func TestParseMemAvailable(t *testing.T) {
	got, err := parseMemAvailable([]byte("MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n"))
	if err != nil || got != 20000000<<10 {
		t.Fatalf("got %d, %v", got, err)
	}
	for _, bad := range []string{"MemTotal: 1 kB\n", "MemAvailable: x kB\n", "MemAvailable: 99999999999999999 kB\n"} {
		if _, err := parseMemAvailable([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestBuildFeatures: the plain modules (what go test builds) have the XLA backend but neither native
// float8 nor the allocator's statistics nor host pinning nor the compile cache nor the Triton call nor
// the queued execute; the GPU build's -gotest run of this package sees all six (which also proves that the patched
// SetCompileCache matches compileCacher and TritonCall/BackendCall match internal/xlaext's interfaces:
// a mismatch would leave them silently missing).
func TestBuildFeatures(t *testing.T) {
	f := BuildFeatures()
	if !f.XLA {
		t.Skip("built without the XLA backend")
	}
	if f.NativeFP8 != f.AllocatorStats || f.NativeFP8 != f.PinnedHost || f.NativeFP8 != f.CompileCache || f.NativeFP8 != f.TritonCall ||
		f.NativeFP8 != f.MosaicGPUCall || f.NativeFP8 != f.QueuedExecute {
		t.Errorf("features %+v: the GPU build's patches come together", f)
	}
	t.Logf("features %+v", f)
}

// The plugin's version comes from the dist-info folder of the wheel that installed it; a plugin from
// anywhere else has none (its Triton kernels are then not used).
func TestPluginVersion(t *testing.T) {
	site := t.TempDir()
	plugin := filepath.Join(site, "jax_plugins", "xla_cuda13", "xla_cuda_plugin.so")
	for _, dir := range []string{filepath.Dir(plugin), filepath.Join(site, "jax_cuda13_plugin-0.11.2.dist-info"),
		filepath.Join(site, "jax_cuda12_plugin-0.4.30.dist-info")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := PluginVersion(plugin); got != "jax-cuda13-plugin 0.11.2" {
		t.Errorf("wheel layout: %q", got)
	}
	if got := PluginVersion(filepath.Join(site, "elsewhere", "pjrt_c_api_cuda_plugin.so")); got != "" {
		t.Errorf("not from a wheel: %q", got)
	}
	if err := os.Mkdir(filepath.Join(site, "jax_cuda13_plugin-0.12.0.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := PluginVersion(plugin); got != "" {
		t.Errorf("two versions installed: %q, want none (which one is loaded is unknown)", got)
	}
}

// The Mosaic GPU runtime library is the one the plugin's own wheel installed, a regular file; a plugin
// from elsewhere or a wheel without it has none.
func TestMosaicGPURuntime(t *testing.T) {
	site := t.TempDir()
	plugin := filepath.Join(site, "jax_plugins", "xla_cuda13", "xla_cuda_plugin.so")
	lib := filepath.Join(site, "jax_cuda13_plugin", "libmosaic_gpu_runtime.so")
	for _, dir := range []string{filepath.Dir(plugin), filepath.Dir(lib)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := mosaicGPURuntime(plugin); got != "" {
		t.Errorf("no library yet: %q", got)
	}
	if err := os.Mkdir(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := mosaicGPURuntime(plugin); got != "" {
		t.Errorf("a folder by the library's name: %q", got)
	}
	if err := os.Remove(lib); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mosaicGPURuntime(plugin); got != lib {
		t.Errorf("wheel layout: %q, want %q", got, lib)
	}
	if got := mosaicGPURuntime(filepath.Join(site, "elsewhere", "pjrt_c_api_cuda_plugin.so")); got != "" {
		t.Errorf("not from a wheel: %q", got)
	}
}
