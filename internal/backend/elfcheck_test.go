package backend

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute"
)

// badLibraries writes the files a broken download or a wrong path gives: a real ELF cut to
// 100 bytes and to 60% of its size, and a text file. Each maps to what the error must say.
func badLibraries(t *testing.T, dir, name string) map[string]string {
	t.Helper()
	elfData, err := os.ReadFile("/bin/true")
	if err != nil || len(elfData) < 1000 || string(elfData[:4]) != "\x7fELF" {
		t.Skipf("needs an ELF /bin/true: %v", err)
	}
	files := map[string]string{}
	for sub, content := range map[string]string{
		"cut100":  string(elfData[:100]),
		"cut60pc": string(elfData[:len(elfData)*6/10]),
		"text":    "this is not a library\n",
	} {
		p := filepath.Join(dir, sub, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		files[p] = map[string]string{"cut100": "corrupt or truncated", "cut60pc": "truncated", "text": "not an ELF file"}[sub]
	}
	return files
}

func TestCheckLoadable(t *testing.T) {
	if err := checkLoadable("/bin/true"); err != nil {
		t.Fatalf("a whole ELF file: %v", err)
	}
	for path, want := range badLibraries(t, t.TempDir(), "lib.so") {
		err := checkLoadable(path)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: got %v, want %q naming the file", path, err, want)
		}
	}
}

// A truncated or foreign plugin, or preloaded library, is refused with its name before
// dlopen, where it would crash the process with SIGBUS.
func TestOpenRefusesBadLibraries(t *testing.T) {
	if !slices.Contains(compute.List(), string(KindXLA)) {
		t.Skip("xla is not compiled into this test binary")
	}
	for path, want := range badLibraries(t, t.TempDir(), "pjrt_c_api_cpu_plugin.so") {
		p := &Plan{Backend: KindXLA, Plugin: path, LibMode: LibsSystem}
		_, err := p.Open()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("plugin %s: got %v, want %q naming the file", path, err, want)
		}
	}
	for lib, want := range badLibraries(t, t.TempDir(), "libcudart.so.12") {
		p := &Plan{Backend: KindXLA, Platform: "cuda", Plugin: "/bin/true", LibMode: LibsPreload, LibDirs: []string{filepath.Dir(lib)}}
		_, err := p.Open()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), lib) {
			t.Errorf("preloaded %s: got %v, want %q naming the file", lib, err, want)
		}
	}
}
