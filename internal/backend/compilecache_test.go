package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/compute"
)

// hookedBackend stands for the GPU build's go-xla backend: it has SetCompileCache, and its compile
// goes through the installed cache as the patch's Backend.compile does.
type hookedBackend struct {
	compute.Backend
	cache interface {
		Compile(key []byte, load func(serialized []byte) error, compile func() error, serialize func() ([]byte, error)) error
	}
	compiles, loads int
}

func (b *hookedBackend) SetCompileCache(c interface {
	Compile(key []byte, load func(serialized []byte) error, compile func() error, serialize func() ([]byte, error)) error
}) {
	b.cache = c
}

// compile mimics the patch: load the program's executable, or compile it and hand over its bytes.
func (b *hookedBackend) compile(program string) error {
	return b.cache.Compile([]byte(program),
		func(data []byte) error {
			if string(data) != "exe:"+program {
				return errors.New("not this program's executable")
			}
			b.loads++
			return nil
		},
		func() error { b.compiles++; return nil },
		func() ([]byte, error) { return []byte("exe:" + program), nil })
}

// plainBackend is a backend without the hook (a plain build's go-xla, the pure-Go backend).
type plainBackend struct{ compute.Backend }

func TestInstallCompileCache(t *testing.T) {
	dir := t.TempDir()
	var warnings []string
	warn := func(err error) { warnings = append(warnings, err.Error()) }
	if c := installCompileCache(&plainBackend{}, dir, warn); c != nil {
		t.Fatal("installed into a backend without the hook")
	}
	if c := installCompileCache(&hookedBackend{}, "", warn); c != nil {
		t.Fatal("installed with the cache off")
	}
	// Two processes: the second loads what the first compiled.
	for run := range 2 {
		b := &hookedBackend{}
		c := installCompileCache(b, dir, warn)
		if c == nil || b.cache == nil {
			t.Fatal("not installed")
		}
		for _, p := range []string{"dit", "vae"} {
			if err := b.compile(p); err != nil {
				t.Fatal(err)
			}
		}
		if want := [2][2]int{{2, 0}, {0, 2}}[run]; b.compiles != want[0] || b.loads != want[1] {
			t.Fatalf("run %d: %d compiles, %d loads; want %v (stats %+v)", run, b.compiles, b.loads, want, c.Stats())
		}
	}
	if len(warnings) != 0 {
		t.Fatalf("warnings: %v", warnings)
	}
}

// Open's edits of XLA_FLAGS: the autotune cache goes under the cache folder unless the user chose one.
func TestAutotuneFlag(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")
	note := setAutotuneFlag(dir)
	want := "--xla_gpu_enable_triton_gemm=false " + autotuneFlag + "=" + filepath.Join(dir, "autotune")
	if got := os.Getenv("XLA_FLAGS"); got != want || !strings.Contains(note, autotuneFlag) {
		t.Fatalf("XLA_FLAGS %q, note %q", got, note)
	}
	if st, err := os.Stat(filepath.Join(dir, "autotune")); err != nil || !st.IsDir() {
		t.Fatalf("autotune folder: %v", err)
	}
	t.Setenv("XLA_FLAGS", autotuneFlag+"=/mine")
	if note := setAutotuneFlag(dir); os.Getenv("XLA_FLAGS") != autotuneFlag+"=/mine" || !strings.Contains(note, "already") {
		t.Fatalf("overrode the user's flag: %q, note %q", os.Getenv("XLA_FLAGS"), note)
	}
	if strings.Contains(os.Getenv("XLA_FLAGS"), "kernel_cache_file") {
		t.Fatal("the kernel cache file is never set")
	}
}

// The go backend never gets a cache or a flag, whatever the plan says.
func TestCompileCacheGoBackend(t *testing.T) {
	t.Setenv("XLA_FLAGS", "")
	p, err := ResolveWith("go", System{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	p.CompileCacheDir = t.TempDir()
	b, err := p.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	if p.CompileCache != nil || p.CompileCacheNote != "" || os.Getenv("XLA_FLAGS") != "" {
		t.Fatalf("cache %v, note %q, XLA_FLAGS %q", p.CompileCache, p.CompileCacheNote, os.Getenv("XLA_FLAGS"))
	}
}

// A run with FP8 GEMMs turns XLA's Triton GEMMs off (their autotuning did not finish), unless the user
// set the flag; other runs leave XLA_FLAGS alone.
func TestFP8GEMMFlag(t *testing.T) {
	t.Setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
	(&Plan{}).setGEMMFlag()
	if got := os.Getenv("XLA_FLAGS"); got != "--xla_dump_to=/tmp/x" {
		t.Fatalf("bf16 run: %q", got)
	}
	(&Plan{FP8GEMMs: true}).setGEMMFlag()
	if got := os.Getenv("XLA_FLAGS"); got != "--xla_dump_to=/tmp/x "+tritonGEMMFlag+"=false" {
		t.Fatalf("FP8 run: %q", got)
	}
	t.Setenv("XLA_FLAGS", tritonGEMMFlag+"=true")
	(&Plan{FP8GEMMs: true}).setGEMMFlag()
	if got := os.Getenv("XLA_FLAGS"); got != tritonGEMMFlag+"=true" {
		t.Fatalf("the user's flag overridden: %q", got)
	}
}
