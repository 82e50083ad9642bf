package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheckUniqueKeys(t *testing.T) {
	for _, tc := range []struct{ in, wantErr string }{
		{`{"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]}`, ""},
		{`[1, "x", null, true, {}]`, ""},
		{`{"model": {"type": "BPE"}, "model": {"type": "WordPiece"}}`, `key "model" appears twice in the top-level object`},
		{`{"model": {"type": "BPE", "type": "Unigram"}}`, `key "type" appears twice in "model"`},
		{`{"x": [{"k": 1}, {"k": 1, "k": 2}]}`, `key "k" appears twice in "x[1]"`},
		{`{"a\u0062": 1, "ab": 2}`, `key "ab" appears twice`},
		{`{"a": 1} {"b": 2}`, "data after"},
		{`{"a": }`, "invalid JSON"},
	} {
		err := CheckUniqueKeys([]byte(tc.in))
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: got %v, want %q", tc.in, err, tc.wantErr)
		}
	}
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if err := CheckUniqueKeys([]byte(deep)); err == nil {
		t.Error("nesting beyond the limit passed")
	}
}

// FuzzCheckUniqueKeys checks the walker against encoding/json: it never panics, and it accepts
// exactly the valid documents, except those with a repeated key.
func FuzzCheckUniqueKeys(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,{"c":null}]}`, `{"a":1,"a":2}`, `[[],{}]`, `"x"`, `{"a":{"b":{"b":1}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckUniqueKeys(data)
		if err == nil && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
	})
}
