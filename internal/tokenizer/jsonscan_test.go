package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// refParse decodes model.vocab and model.merges with encoding/json, the
// reference for jsonScan's fast path.
func refParse(t testing.TB, data []byte) (map[string]int, []string, bool) {
	var f struct {
		Model struct {
			Vocab  map[string]int  `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var pairs [][]string
	if json.Unmarshal(f.Model.Merges, &pairs) == nil {
		var flat []string
		for _, p := range pairs {
			flat = append(flat, p...)
		}
		return f.Model.Vocab, flat, false
	}
	var lines []string
	if err := json.Unmarshal(f.Model.Merges, &lines); err != nil {
		t.Fatal(err)
	}
	return f.Model.Vocab, lines, true
}

func TestJSONScanMatchesEncodingJSON(t *testing.T) {
	flags, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	escaped := []byte(`{"version":"1.0", "added_tokens": [], "model" : {"type":"BPE", "ignore_merges": false,
		"vocab": {"\u0120a": 0, "q\"uote": 1, "back\\slash": 2, "\ud83d\ude00": 3, "tab\t": 4, "é": 5, "\/": 6, "big": 123456789},
		"merges": [["\u0120", "a"], ["q\"", "uote"]], "extra": {"nested": [1, "x", {"y": null}]}},
		"normalizer": {"type": "NFC"}, "unknown": [true, false, -1.5e3]}`)
	for name, data := range map[string][]byte{"flags": flags, "escapes": escaped} {
		t.Run(name, func(t *testing.T) {
			f, err := parseTokenizerJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			vocab, merges, legacy := refParse(t, data)
			if !reflect.DeepEqual(f.Model.Vocab, vocab) {
				t.Errorf("vocab differs:\n got  %v\n want %v", f.Model.Vocab, vocab)
			}
			if !reflect.DeepEqual(f.Model.Merges, merges) || f.Model.LegacyMerges != legacy {
				t.Errorf("merges differ:\n got  %q (legacy %v)\n want %q (legacy %v)", f.Model.Merges, f.Model.LegacyMerges, merges, legacy)
			}
		})
	}
}

func TestJSONScanRejectsMalformed(t *testing.T) {
	for _, s := range []string{
		``, `{`, `{"model": {"vocab": {"a": 1,}}}`, `{"model": {"vocab": {"a": 01}}}`, `{"model": {"vocab": {"a": 1.5}}}`,
		`{"model": {"merges": [["a"]]}}`, `{"model": {"merges": ["a b", ["a", "b"]]}}`, `{"model": {"merges": [["a", "b"], "a b"]}}`,
		`{"model": {"vocab": {"a\x01": 1}}}`, `{"model": {"vocab": {"a": 1}}} x`, `{"padding": [}`, `{"padding": tru}`, `{"x": "\q"}`,
		`{"model": {"vocab": {"a": 1}`, `[1]`,
	} {
		if _, err := parseTokenizerJSON([]byte(s)); err == nil {
			t.Errorf("parseTokenizerJSON(%q) accepted malformed JSON", s)
		}
	}
}

// FuzzCompileJSON: no byte string makes the loader panic or hang, and a tokenizer it
// accepts encodes, decodes and survives the cache round trip.
func FuzzCompileJSON(f *testing.F) {
	flags, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(flags)
	f.Add([]byte(`{"model": {"vocab": {"a": 1}, "merges": ["a b"]}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "model": null}`))
	f.Add([]byte(`{"added_tokens": [{"id": 1, "content": "x", "content": "y"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := compileJSON(data, [32]byte{})
		if err != nil {
			return
		}
		tk := newFromCompiled(c)
		text := string(data[:min(len(data), 64)])
		ids := tk.Encode(text)
		if _, err := tk.Decode(ids); err != nil {
			t.Fatalf("Decode(Encode(...)) of a loaded tokenizer: %v", err)
		}
		var key [32]byte
		back, err := decodeCompiled(encodeCompiled(key, c), key)
		if err != nil {
			t.Fatalf("the cache form of an accepted tokenizer does not decode: %v", err)
		}
		if !slices.Equal(newFromCompiled(back).Encode(text), ids) {
			t.Fatal("the cache round trip changed the tokenization")
		}
	})
}
