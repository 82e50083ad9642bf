package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"fastvideo/fastvideo"
)

// A panic anywhere below Run is an internal error, exit 1: never the invalid-input code 2, which
// Go's own crash status would otherwise collide with.
func TestPanicExitsOne(t *testing.T) {
	c := Command{Name: "t", Summary: "a test", DefaultModel: "tiny-h3",
		Extra: func(*flag.FlagSet) func(*fastvideo.Request, map[string]bool) error {
			return func(*fastvideo.Request, map[string]bool) error { panic("boom") }
		}}
	var out, errs bytes.Buffer
	if code := c.Run(context.Background(), []string{"-plan"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "internal error: boom") {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
}

// Invalid input is reported under the flag the user typed, not the library's field name.
func TestMessagesNameFlags(t *testing.T) {
	c := Command{Name: "t", Summary: "a test", DefaultModel: "tiny-h3"}
	var out, errs bytes.Buffer
	if code := c.Run(context.Background(), []string{"-plan", "-frames", "9223372036854775807"}, &out, &errs); code != 2 ||
		!strings.Contains(errs.String(), "invalid -frames 9223372036854775807") {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
}

// -h says in one line what the binary does, then the flags; it is not an error.
func TestHelpSummary(t *testing.T) {
	c := Command{Name: "t", Summary: "generate things", DefaultModel: "tiny-h3"}
	var out, errs bytes.Buffer
	if code := c.Run(context.Background(), []string{"-h"}, &out, &errs); code != 0 || !strings.HasPrefix(errs.String(), "t: generate things\n") {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
}

// -lora PATH[:STRENGTH]: the text after the last colon is the strength only when it is a number; a path
// may hold colons.
func TestParseLoRA(t *testing.T) {
	for _, c := range []struct {
		in       string
		path     string
		strength float64
	}{
		{"a.safetensors", "a.safetensors", 1},
		{"a.safetensors:0.5", "a.safetensors", 0.5},
		{"a.safetensors:-1e-1", "a.safetensors", -0.1},
		{"dir:v2/a.safetensors", "dir:v2/a.safetensors", 1},
		{"dir:2/a.safetensors:0.75", "dir:2/a.safetensors", 0.75},
		{"a.safetensors:", "a.safetensors:", 1},
		{"a:b:c", "a:b:c", 1},
	} {
		if got := ParseLoRA(c.in); got.Path != c.path || got.Strength != c.strength {
			t.Errorf("%q: %+v, want %s at %g", c.in, got, c.path, c.strength)
		}
	}
}

// -compile-cache: a folder that cannot serve is invalid input (exit 2) naming the flag, the value and
// the fix, before anything loads; "off", a new folder and the default pass, and the plan says which.
func TestCompileCacheFlag(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	c := Command{Name: "t", Summary: "a test", DefaultModel: "tiny-h3"}
	run := func(args ...string) (int, string, string) {
		var out, errs bytes.Buffer
		code := c.Run(context.Background(), append([]string{"-plan", "-json"}, args...), &out, &errs)
		return code, out.String(), errs.String()
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := []string{file, filepath.Join(file, "sub")}
	if runtime.GOOS == "linux" {
		bad = append(bad, "/proc/fastvideo-cache") // exists nowhere and cannot be created, even by root
	}
	for _, dir := range bad {
		code, _, errs := run("-compile-cache", dir)
		if code != 2 || !strings.Contains(errs, `invalid -compile-cache "`+dir+`"`) || !strings.Contains(errs, `"off"`) {
			t.Errorf("%s: exit %d, stderr %q", dir, code, errs)
		}
	}
	fresh := filepath.Join(t.TempDir(), "new", "cache")
	for _, c := range []struct{ arg, note string }{{"off", "off"}, {fresh, fresh}, {"", filepath.Join("fastvideo", "xla")}} {
		code, out, errs := run("-compile-cache", c.arg)
		var p struct {
			CompileCache string `json:"compile_cache"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &p) != nil || !strings.Contains(p.CompileCache, c.note) {
			t.Errorf("%q: exit %d, plan's compile_cache %q, stderr %q", c.arg, code, p.CompileCache, errs)
		}
	}
	if _, err := os.Stat(fresh); err == nil {
		t.Error("a plan created the cache folder")
	}
}
