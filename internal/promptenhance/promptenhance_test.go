package promptenhance

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/internal/testutil"
)

// fixtureKind marks the fixtures of this test: testdata/prompt_enhance.json, made by upstream's own
// module (gen_prompt_enhance.py), and any JSON file of this kind in $FASTVIDEO_EXTRA_FIXTURES.
const fixtureKind = "prompt_enhance_template"

type fixture struct {
	Kind           string `json:"kind"`
	UpstreamCommit string `json:"upstream_commit"`
	Cases          []struct {
		Prompt     string `json:"prompt"`
		Template   string `json:"template"`
		Normalized string `json:"normalized"`
		CacheFile  string `json:"cache_file"`
		Error      string `json:"error"`
	} `json:"cases"`
}

// readFixture reads one fixture file; ok is false for a JSON file of another kind.
func readFixture(t *testing.T, path string) (f fixture, ok bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil || f.Kind != fixtureKind {
		return f, false
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s has no cases", path)
	}
	return f, true
}

// fixtures are testdata/prompt_enhance.json and the extra fixtures of this kind.
func fixtures(t *testing.T) []fixture {
	t.Helper()
	f, ok := readFixture(t, filepath.Join("testdata", "prompt_enhance.json"))
	if !ok {
		t.Fatalf("testdata/prompt_enhance.json is not a %s fixture", fixtureKind)
	}
	all := []fixture{f}
	if dir := os.Getenv(testutil.ExtraFixturesEnv); dir != "" {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, p := range paths {
			if f, ok := readFixture(t, p); ok {
				all = append(all, f)
			}
		}
	}
	return all
}

// TestTemplateMatchesUpstream: every fixture prompt enhances to upstream's exact text (or is refused
// as empty), and its cache file has upstream's name.
func TestTemplateMatchesUpstream(t *testing.T) {
	for _, f := range fixtures(t) {
		checkFixture(t, f)
	}
}

func checkFixture(t *testing.T, f fixture) {
	for _, c := range f.Cases {
		got, err := Template(c.Prompt)
		if c.Error != "" {
			if !errors.Is(err, ErrEmpty) {
				t.Errorf("%q: %q, %v; upstream refuses it (%s)", c.Prompt, got, err, c.Error)
			}
			continue
		}
		if err != nil || got != c.Template {
			t.Errorf("%q:\n got  %q (%v)\n want %q", c.Prompt, got, err, c.Template)
		}
		if n, _ := Normalize(c.Prompt); n != c.Normalized {
			t.Errorf("%q normalizes to %q, upstream %q", c.Prompt, n, c.Normalized)
		}
		if name := filepath.Base(CachePath("x", c.Normalized, Backend)); name != c.CacheFile {
			t.Errorf("%q: cache file %s, upstream %s", c.Prompt, name, c.CacheFile)
		}
	}
}

// TestEnhanceCache: a miss writes the entry (nothing else is left in the folder), a hit is reported as
// "cache" with the same text, and an entry that is corrupt or holds another prompt is a miss that is
// rewritten; without a folder nothing is cached.
func TestEnhanceCache(t *testing.T) {
	dir := t.TempDir()
	first, err := Enhance(" a red  fox ", dir)
	if err != nil || first.Backend != Backend || first.Original != "a red fox" || !strings.HasPrefix(first.Enhanced, "a red fox, ") {
		t.Fatalf("first: %+v, %v", first, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != filepath.Base(CachePath(dir, "a red fox", Backend)) {
		t.Fatalf("cache folder holds %v", entries)
	}
	second, err := Enhance("a red fox", dir)
	if err != nil || second.Backend != "cache" || second.Enhanced != first.Enhanced {
		t.Fatalf("second: %+v, %v", second, err)
	}
	path := CachePath(dir, "a red fox", Backend)
	for _, bad := range []string{"{", `{"original": "another prompt", "enhanced": "x"}`, `{"original": "a red fox"}`} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if r, err := Enhance("a red fox", dir); err != nil || r.Backend != Backend || r.Enhanced != first.Enhanced {
			t.Errorf("cache entry %q: %+v, %v; want a fresh template result", bad, r, err)
		}
	}
	if _, err := Enhance(" \t ", dir); !errors.Is(err, ErrEmpty) {
		t.Errorf("an empty prompt: %v", err)
	}
	if r, err := Enhance("a red fox", ""); err != nil || r.Backend != Backend {
		t.Errorf("no cache: %+v, %v", r, err)
	}
}
