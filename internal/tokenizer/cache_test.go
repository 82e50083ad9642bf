package tokenizer

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func flagsKey(t *testing.T) [32]byte {
	raw, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(raw)
}

// TestCacheRoundTripAndCorruption: a load writes the cache, the next one reads
// it and tokenizes identically, and every damaged cache file is ignored and
// rewritten.
func TestCacheRoundTripAndCorruption(t *testing.T) {
	dir := t.TempDir()
	cases := readCases(t, filepath.Join(flagsDir, "flags_cases.jsonl"))
	cold, err := LoadWith(flagsDir, Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if cold.fromCache {
		t.Fatal("first load claims a cache hit")
	}
	path := cachePath(dir, flagsKey(t))
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no cache file written: %v", err)
	}
	same := func(t *testing.T, tk *Tokenizer) {
		t.Helper()
		for _, c := range cases {
			if got := tk.Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Fatalf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
			}
		}
		if tk.Fingerprint() != cold.Fingerprint() || tk.VocabSize() != cold.VocabSize() {
			t.Fatalf("fingerprint/vocab size differ after the cache")
		}
	}
	warm, err := LoadWith(flagsDir, Options{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !warm.fromCache {
		t.Fatal("second load did not use the cache")
	}
	same(t, warm)

	damage := map[string][]byte{
		"empty":     {},
		"truncated": good[:len(good)/2],
		"garbage":   []byte(strings.Repeat("x", len(good))),
		"bit flip":  flip(good, len(good)/3),
		"bad magic": flip(good, 2),
		"bad crc":   flip(good, len(good)-1),
	}
	for name, data := range damage {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			tk, err := LoadWith(flagsDir, Options{CacheDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if tk.fromCache {
				t.Fatal("a damaged cache file was used")
			}
			same(t, tk)
			if again, _ := os.ReadFile(path); !slices.Equal(again, good) {
				t.Fatal("the damaged cache file was not rewritten")
			}
		})
	}

	// A cache file filed under the right name but made from another tokenizer
	// (its recorded source hash differs) is stale, not trusted.
	other := encodeCompiled([32]byte{1}, mustCompile(t))
	if err := os.WriteFile(path, other, 0o644); err != nil {
		t.Fatal(err)
	}
	if tk, err := LoadWith(flagsDir, Options{CacheDir: dir}); err != nil || tk.fromCache {
		t.Fatalf("stale cache: err=%v fromCache=%v", err, tk != nil && tk.fromCache)
	}
}

// TestCacheDecoderRejectsEveryTruncation: no prefix of a valid cache file
// decodes (and none panics), checksum or not.
func TestCacheDecoderRejectsEveryTruncation(t *testing.T) {
	key := flagsKey(t)
	good := encodeCompiled(key, mustCompile(t))
	if _, err := decodeCompiled(good, key); err != nil {
		t.Fatalf("valid cache rejected: %v", err)
	}
	for n := 0; n < len(good); n += 7 {
		if _, err := decodeCompiled(good[:n], key); err == nil {
			t.Fatalf("a %d-byte prefix of a %d-byte cache decoded", n, len(good))
		}
	}
}

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0x40
	return c
}

func mustCompile(t *testing.T) *compiled {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := compileJSON(raw, sha256.Sum256(raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRejectsUnsupported: every stage or option this package does not
// implement fails the load with an error naming the field, instead of
// tokenizing differently from HF.
func TestRejectsUnsupported(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, want string
		edit       func(f map[string]any)
	}{
		{"NFKC", "normalizer", func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFKC"} }},
		{"lowercase in sequence", "normalizer.normalizers[1]", func(f map[string]any) {
			f["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Lowercase"}}}
		}},
		{"other regex", "pattern.Regex", func(f map[string]any) { pre(f, 0)["pattern"] = map[string]any{"Regex": `\s+`} }},
		{"string pattern", "pretokenizers[0]", func(f map[string]any) { pre(f, 0)["pattern"] = map[string]any{"String": " "} }},
		{"split removed", "behavior", func(f map[string]any) { pre(f, 0)["behavior"] = "Removed" }},
		{"split inverted", "invert", func(f map[string]any) { pre(f, 0)["invert"] = true }},
		{"byte-level regex", "use_regex", func(f map[string]any) { pre(f, 1)["use_regex"] = true }},
		{"byte-level regex by default", "use_regex", func(f map[string]any) { delete(pre(f, 1), "use_regex") }},
		{"prefix space", "add_prefix_space", func(f map[string]any) { pre(f, 1)["add_prefix_space"] = true }},
		{"no pre-tokenizer", "pre_tokenizer", func(f map[string]any) { f["pre_tokenizer"] = nil }},
		{"no decoder", "decoder", func(f map[string]any) { f["decoder"] = nil }},
		{"unknown post-processor", "post_processor", func(f map[string]any) { f["post_processor"] = map[string]any{"type": "Magic"} }},
		{"truncation", "truncation", func(f map[string]any) { f["truncation"] = map[string]any{"max_length": 8} }},
		{"padding", "padding", func(f map[string]any) { f["padding"] = map[string]any{"length": 8} }},
		{"wordpiece", "model.type", func(f map[string]any) { model(f)["type"] = "WordPiece" }},
		{"dropout", "model.dropout", func(f map[string]any) { model(f)["dropout"] = 0.1 }},
		{"subword prefix", "continuing_subword_prefix", func(f map[string]any) { model(f)["continuing_subword_prefix"] = "##" }},
		{"word suffix", "end_of_word_suffix", func(f map[string]any) { model(f)["end_of_word_suffix"] = "</w>" }},
		{"merge out of vocab", "model.merges[0]", func(f map[string]any) { model(f)["merges"] = []any{"h zz"} }},
		{"merged token out of vocab", "merged token", func(f map[string]any) { model(f)["merges"] = []any{"x y"} }},
		{"legacy merge with 3 parts", "model.merges[0]", func(f map[string]any) { model(f)["merges"] = []any{"a b c"} }},
		{"missing byte symbol", "0x41", func(f map[string]any) { delete(model(f)["vocab"].(map[string]any), "A") }},
		{"shared id", "share id", func(f map[string]any) { model(f)["vocab"].(map[string]any)["zzz"] = 0 }},
		{"added id mismatch", "added_tokens[0]", func(f map[string]any) { added(f, 0)["id"] = 5000 }},
		{"added flag missing", "added_tokens[1]", func(f map[string]any) { delete(added(f, 1), "rstrip") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f map[string]any
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
			tc.edit(f)
			_, err := LoadWith(writeJSON(t, f), Options{NoCache: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func pre(f map[string]any, i int) map[string]any {
	return f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[i].(map[string]any)
}

func model(f map[string]any) map[string]any { return f["model"].(map[string]any) }

func added(f map[string]any, i int) map[string]any {
	return f["added_tokens"].([]any)[i].(map[string]any)
}

// TestDefaultCacheDir: Load caches under os.UserCacheDir()/fastvideo/tokenizer.
func TestDefaultCacheDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", home) // os.UserCacheDir on Linux
	t.Setenv("HOME", home)           // and on macOS
	if _, err := Load(flagsDir); err != nil {
		t.Fatal(err)
	}
	dir, err := defaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dir, home) {
		t.Skipf("os.UserCacheDir() = %s ignores $XDG_CACHE_HOME/$HOME here", dir)
	}
	if _, err := os.Stat(cachePath(dir, flagsKey(t))); err != nil {
		t.Fatalf("Load wrote no cache under %s: %v", dir, err)
	}
	tk, err := Load(flagsDir)
	if err != nil || !tk.fromCache {
		t.Fatalf("second Load: err=%v, cache used=%v", err, tk != nil && tk.fromCache)
	}
}
