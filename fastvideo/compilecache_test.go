package fastvideo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/internal/backend"
	"fastvideo/internal/compilecache"
)

// WithCompileCache: "off" and "" pass, a folder that cannot serve is a *RequestError for compile_cache
// naming the fix; the default folder lives under the user cache folder and an unusable one turns the
// cache off with a warning instead of failing.
func TestWithCompileCache(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		_, err := applyOptions([]Option{WithCompileCache(dir)})
		var re *RequestError
		if !errors.As(err, &re) || re.Field != "compile_cache" || !strings.Contains(re.Allowed, `"off"`) {
			t.Errorf("%s: %v", dir, err)
		}
	}
	cacheHome := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cacheHome)
	t.Setenv("HOME", cacheHome) // darwin's user cache folder is under $HOME
	for _, c := range []struct{ in, dir string }{{"off", ""}, {"", "fastvideo/xla"}, {file + ".d", file + ".d"}} {
		o, err := applyOptions([]Option{WithCompileCache(c.in)})
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		dir, warning := o.compileCacheDir(true)
		if warning != "" || !strings.HasSuffix(dir, filepath.FromSlash(c.dir)) || (c.dir == "") != (dir == "") {
			t.Errorf("%q: dir %q, warning %q", c.in, dir, warning)
		}
	}
	// A default folder that cannot be created: off, with a warning saying how to choose another.
	t.Setenv("XDG_CACHE_HOME", file)
	t.Setenv("HOME", file)
	if dir, warning := (Options{}).compileCacheDir(true); dir != "" || !strings.Contains(warning, "-compile-cache DIR") {
		t.Errorf("unusable default: dir %q, warning %q", dir, warning)
	}
}

// -version lists the compile cache, available exactly when the backend has the GPU build's hook.
func TestCompileCacheFeature(t *testing.T) {
	var got *Feature
	for _, f := range BuildFeatures() {
		if strings.Contains(f.Name, "compile cache") {
			got = &f
		}
	}
	if got == nil || got.Available != backend.BuildFeatures().CompileCache {
		t.Fatalf("feature %+v, backend %+v", got, backend.BuildFeatures())
	}
	if !got.Available && !strings.Contains(got.Note, GPUBuildCommand) {
		t.Fatalf("the missing feature does not say how to get it: %q", got.Note)
	}
	for _, dir := range []string{"", "/c"} {
		if n := compileCacheNote(dir); n == "" || (dir != "" && !strings.HasPrefix(n, dir)) {
			t.Errorf("note %q", n)
		}
	}
}

// Warnings from compiling goroutines wait for the generation to report them, once.
func TestAsyncWarnings(t *testing.T) {
	w := &asyncWarnings{}
	done := make(chan bool)
	for range 4 {
		go func() { w.add(errors.New("x")); done <- true }()
	}
	for range 4 {
		<-done
	}
	if got := w.take(); len(got) != 4 || len(w.take()) != 0 || (*asyncWarnings)(nil).take() != nil {
		t.Fatalf("took %v", got)
	}
}

// A call's Result.CompileCache is the cache's counts over that call; without a cache it is nil.
func TestCompileCacheStats(t *testing.T) {
	var none *compileCacheRun
	if none.stats() != nil || none.takeWarnings() != nil || none.note() != "" || (&compileCacheRun{}).stats() != nil {
		t.Fatal("a generator without a cache reports one")
	}
	c := &compileCacheRun{dir: t.TempDir()}
	c.cache = compilecache.New(c.dir, c.warnings.add)
	compile := func(p string) {
		err := c.cache.Compile([]byte(p), func([]byte) error { return nil }, func() error { return nil },
			func() ([]byte, error) { return []byte(p), nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	compile("a")
	before := c.stats()
	compile("a")
	compile("b")
	if got := *statsSince(c.stats(), before); got != (api.CompileCacheStats{Loaded: 1, Compiled: 1, Stored: 1}) {
		t.Fatalf("since: %+v", got)
	}
}
