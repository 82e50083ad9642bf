package backend

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/compilecache"
)

// TestCUDADiscovery runs New("xla:cuda")'s steps with no manual environment setup on a GPU machine:
//
//	bash bench/build_gpu.sh -test .gpu/backend.test ./internal/backend
//	FASTVIDEO_GPU_TEST=1 ./.gpu/backend.test -test.run TestCUDADiscovery -test.v
func TestCUDADiscovery(t *testing.T) {
	if os.Getenv("FASTVIDEO_GPU_TEST") != "1" {
		t.Skip("set FASTVIDEO_GPU_TEST=1 on a machine with an NVIDIA GPU")
	}
	start := time.Now()
	p, err := Resolve("xla:cuda")
	if err != nil {
		t.Fatal(err)
	}
	resolved := time.Since(start)
	b, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	t.Logf("resolve %v, open %v", resolved.Round(time.Millisecond), (time.Since(start) - resolved).Round(time.Millisecond))
	t.Logf("plan: %s", p)
	t.Logf("backend: %s", b.Description())
	t.Logf("plugin: %s (found by %s), loaded as %s", p.Plugin, p.FoundBy, p.LoadPath)
	t.Logf("libraries: mode %q, dirs %v", p.LibMode, p.LibDirs)
	t.Logf("preloaded %d, failed %d", len(p.Preloaded), len(p.PreloadFailed))
	for _, f := range p.PreloadFailed {
		t.Logf("  preload failed: %s", f)
	}
	t.Logf("XLA_FLAGS=%q", os.Getenv("XLA_FLAGS"))

	if got, want := runMatmul(t, b), []float32{19, 22, 43, 50}; !slices.Equal(got, want) {
		t.Fatalf("2x2 matmul = %v, want %v", got, want)
	}
	// Big enough for cuBLAS; small integers are exact under TF32, so the result must be exact.
	const n = 512
	x, y := make([][]float32, n), make([][]float32, n)
	for i := range n {
		x[i], y[i] = make([]float32, n), make([]float32, n)
		for k := range n {
			x[i][k] = float32((i+k)%7 - 3)
			y[i][k] = float32((i*k)%5 - 2)
		}
	}
	exec, err := graph.NewExec(b, func(a, c *graph.Node) *graph.Node { return graph.MatMul(a, c) })
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Call1(x, y)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tensors.CopyFlatData[float32](out)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range n {
		for j := range n {
			var want float32
			for k := range n {
				want += x[i][k] * y[k][j]
			}
			if got[i*n+j] != want {
				bad++
			}
		}
	}
	if bad != 0 {
		t.Fatalf("512x512 matmul: %d of %d values differ from the Go reference", bad, n*n)
	}
	t.Logf("512x512 f32 matmul exact")
	// Outside ncu the range is a no-op, but the driver must accept it in XLA's primary context.
	if err := StartCUDAProfiler(0); err != nil {
		t.Fatal(err)
	}
	if err := StopCUDAProfiler(0); err != nil {
		t.Fatal(err)
	}

	// Where the NVIDIA libraries actually came from.
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		var libs []string
		for _, l := range strings.Split(string(maps), "\n") {
			if i := strings.Index(l, "/"); i >= 0 {
				path := l[i:]
				base := path[strings.LastIndex(path, "/")+1:]
				if (strings.HasPrefix(base, "libcu") || strings.HasPrefix(base, "libnccl") || strings.HasPrefix(base, "libnvJit") ||
					strings.HasPrefix(base, "libnvrtc") || strings.Contains(base, "plugin")) && !slices.Contains(libs, path) {
					libs = append(libs, path)
				}
			}
		}
		t.Logf("mapped NVIDIA/plugin libraries:\n  %s", strings.Join(libs, "\n  "))
	}
}

// TestCUDAProfilerWithoutGPU: where no NVIDIA device node exists the range must fail with an error
// (no driver library, or cuInit finding no device), never crash.
func TestCUDAProfilerWithoutGPU(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("an NVIDIA device is present; TestCUDADiscovery covers the range there")
	}
	if err := StartCUDAProfiler(0); err == nil {
		t.Fatal("StartCUDAProfiler succeeded without an NVIDIA device")
	} else {
		t.Logf("start: %v", err)
	}
	if err := StopCUDAProfiler(0); err == nil {
		t.Fatal("StopCUDAProfiler succeeded without an NVIDIA device")
	}
}

// TestCUDACompileCache runs a program in three processes sharing one compile cache (the GPU build):
// the first compiles and stores, the second loads, the third finds its entry damaged, says so and
// compiles again; every one computes the same exact result.
//
//	bash bench/build_gpu.sh -test .gpu/backend.test ./internal/backend
//	FASTVIDEO_GPU_TEST=1 ./.gpu/backend.test -test.run TestCUDACompileCache -test.v
func TestCUDACompileCache(t *testing.T) {
	if os.Getenv("FASTVIDEO_GPU_TEST") != "1" {
		t.Skip("set FASTVIDEO_GPU_TEST=1 on a machine with an NVIDIA GPU")
	}
	if !BuildFeatures().CompileCache {
		t.Skip("a plain build has no compile cache: build the test with bench/build_gpu.sh -test")
	}
	dir := t.TempDir()
	child := func(name string) compilecache.Stats {
		start := time.Now()
		cmd := exec.Command(os.Args[0], "-test.run", "^TestCUDACompileCacheChild$", "-test.v")
		cmd.Env = append(os.Environ(), "FASTVIDEO_CC_CHILD="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s process: %v\n%s", name, err, out)
		}
		var s compilecache.Stats
		i := strings.Index(string(out), "STATS ")
		if i < 0 {
			t.Fatalf("%s process printed no stats:\n%s", name, out)
		}
		fmt.Sscanf(string(out[i:]), "STATS %d %d %d %d", &s.Hits, &s.Misses, &s.Stores, &s.Rejected)
		t.Logf("%s process: %+v in %v\n%s", name, s, time.Since(start).Round(time.Millisecond), grepLines(string(out), "compile", "warning"))
		return s
	}
	if s := child("first"); s.Hits != 0 || s.Misses == 0 || s.Stores != s.Misses {
		t.Fatalf("first process: %+v, want only compiles, each stored", s)
	}
	if s := child("second"); s.Hits == 0 || s.Misses != 0 || s.Rejected != 0 {
		t.Fatalf("second process: %+v, want only loads", s)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, compilecache.ExecutablesDir, "*.xla"))
	if len(entries) == 0 {
		t.Fatal("no entries")
	}
	data, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x10
	if err := os.WriteFile(entries[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	if s := child("third"); s.Rejected != 1 || s.Misses != 1 || s.Stores != 1 {
		t.Fatalf("third process: %+v, want the damaged entry rejected, compiled and stored again", s)
	}
}

// TestCUDACompileCacheChild is one process of TestCUDACompileCache.
func TestCUDACompileCacheChild(t *testing.T) {
	dir := os.Getenv("FASTVIDEO_CC_CHILD")
	if dir == "" {
		t.Skip("run by TestCUDACompileCache")
	}
	p, err := Resolve("xla:cuda")
	if err != nil {
		t.Fatal(err)
	}
	p.CompileCacheDir = dir
	p.CompileCacheWarn = func(err error) { t.Logf("warning: %v", err) }
	b, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	if p.CompileCache == nil {
		t.Fatalf("no cache installed: %s", p.CompileCacheNote)
	}
	t.Logf("plan: %s; XLA_FLAGS=%q", p, os.Getenv("XLA_FLAGS"))
	start := time.Now()
	if got, want := runMatmul(t, b), []float32{19, 22, 43, 50}; !slices.Equal(got, want) {
		t.Fatalf("2x2 matmul = %v, want %v", got, want)
	}
	e, err := graph.NewExec(b, func(a *graph.Node) *graph.Node {
		return graph.ReduceAllSum(graph.Tanh(graph.MatMul(a, graph.Transpose(a, 0, 1))))
	})
	if err != nil {
		t.Fatal(err)
	}
	x := make([][]float32, 256)
	for i := range x {
		x[i] = make([]float32, 256)
		for k := range x[i] {
			x[i][k] = float32((i*7+k*3)%11-5) / 64
		}
	}
	out, err := e.Call1(x)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tensors.CopyFlatData[float32](out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compile and run %v; tanh sum %v", time.Since(start).Round(time.Millisecond), v[0])
	s := p.CompileCache.Stats()
	fmt.Printf("STATS %d %d %d %d\n", s.Hits, s.Misses, s.Stores, s.Rejected)
}

// grepLines keeps the lines holding any of words.
func grepLines(s string, words ...string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				keep = append(keep, l)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}
