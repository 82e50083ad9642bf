package textenc

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
	"fastvideo/internal/textenc/qwen3vl"
)

// byteTokenizer maps every byte to its value (the tiny model's vocabulary is 256)
// and records what it was asked to tokenize.
type byteTokenizer struct{ seen []string }

func (b *byteTokenizer) Encode(text string) ([]int, error) {
	b.seen = append(b.seen, text)
	ids := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int(text[i])
	}
	return ids, nil
}

func (b *byteTokenizer) Fingerprint() string { return "bytes-v1" }

// modelFolder writes the tiny Qwen3-VL fixture as a model folder: config.json
// with the text config nested, one safetensors file under released names.
func modelFolder(t *testing.T) string {
	t.Helper()
	paths, err := testutil.FixturePaths(filepath.Join("qwen3vl", "testdata"), "qwen3vl_text")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no qwen3vl_text fixture in qwen3vl/testdata (%v)", err)
	}
	fx, err := testutil.OpenFixture(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer fx.File.Close()
	dir := t.TempDir()
	src := fx.Weights()
	var ts []safetensors.Tensor
	for _, n := range src.Names() {
		info, _ := src.Tensor(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), info.Data...)})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"text_config": fx.Config["config"]})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const h3Prompt = "(S1) A presenter says <d>[English] Fast H3 is amazing.</d>"

func newConditioner(t *testing.T, dir, cacheDir string, opened *int) (*Conditioner, *byteTokenizer) {
	t.Helper()
	tok := &byteTokenizer{}
	c, err := NewQwen3VL(testutil.Backend(t), dir, tok, cacheDir, qwen3vl.Options{HiddenStateIndex: 3})
	if err != nil {
		t.Fatal(err)
	}
	open := c.OpenEncoder
	c.OpenEncoder = func() (Encoder, error) { *opened++; return open() }
	t.Cleanup(func() { c.Close() })
	return c, tok
}

func bitEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestConditionerCache(t *testing.T) {
	dir := modelFolder(t)
	cacheDir := t.TempDir()
	ctx := context.Background()

	// Reference: the encoder on the verbatim byte ids, no cache.
	tok := &byteTokenizer{}
	ids, _ := tok.Encode(h3Prompt)
	enc, err := qwen3vl.Open(testutil.Backend(t), dir, qwen3vl.Options{HiddenStateIndex: 3})
	if err != nil {
		t.Fatal(err)
	}
	want, wantShape, err := enc.Encode(ctx, ids)
	enc.Close()
	if err != nil {
		t.Fatal(err)
	}

	opened := 0
	c, tok := newConditioner(t, dir, cacheDir, &opened)
	r, err := c.Condition(ctx, h3Prompt)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cached || opened != 1 || !bitEqual(r.Hidden, want) || r.Shape[0] != wantShape[0] || r.Shape[1] != wantShape[1] {
		t.Fatalf("first call: cached=%v opened=%d equal=%v shape=%v", r.Cached, opened, bitEqual(r.Hidden, want), r.Shape)
	}
	if len(tok.seen) != 1 || tok.seen[0] != h3Prompt {
		t.Errorf("tokenizer saw %q; the prompt must pass through verbatim (no template)", tok.seen)
	}
	r, err = c.Condition(ctx, h3Prompt)
	if err != nil || !r.Cached || !bitEqual(r.Hidden, want) || len(tok.seen) != 1 {
		t.Fatalf("second call: cached=%v equal=%v tokenizer calls=%d err=%v", r.Cached, bitEqual(r.Hidden, want), len(tok.seen), err)
	}

	// A new process over the same cache never opens the checkpoint.
	opened2 := 0
	c2, _ := newConditioner(t, dir, cacheDir, &opened2)
	r, err = c2.Condition(ctx, h3Prompt)
	if err != nil || !r.Cached || opened2 != 0 || !bitEqual(r.Hidden, want) {
		t.Fatalf("fresh conditioner: cached=%v opened=%d err=%v", r.Cached, opened2, err)
	}

	// A truncated entry is recomputed, not trusted.
	key := c2.Key
	key.Tokenizer, key.Prompt = "bytes-v1", h3Prompt
	path := c2.Cache.Path(key)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()-7); err != nil {
		t.Fatal(err)
	}
	r, err = c2.Condition(ctx, h3Prompt)
	if err != nil || r.Cached || opened2 != 1 || !bitEqual(r.Hidden, want) {
		t.Fatalf("after truncation: cached=%v opened=%d equal=%v err=%v", r.Cached, opened2, bitEqual(r.Hidden, want), err)
	}

	// Another prompt is another entry.
	r, err = c2.Condition(ctx, h3Prompt+" ")
	if err != nil || r.Cached {
		t.Fatalf("different prompt: cached=%v err=%v", r.Cached, err)
	}
}

func TestCacheKeyFollowsModel(t *testing.T) {
	dir := modelFolder(t)
	cacheDir := t.TempDir()
	n := 0
	a, _ := newConditioner(t, dir, cacheDir, &n)
	tok := &byteTokenizer{}
	b, err := NewQwen3VL(testutil.Backend(t), dir, tok, cacheDir, qwen3vl.Options{HiddenStateIndex: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.Key.Hash() == b.Key.Hash() || a.Key.Layer != 3 || b.Key.Layer != 2 {
		t.Errorf("layer is not in the key: %+v vs %+v", a.Key, b.Key)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(raw, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := newConditioner(t, dir, cacheDir, &n)
	if c.Key.Model == a.Key.Model {
		t.Error("a changed config.json keeps the model identity")
	}
	if _, err := NewQwen3VL(testutil.Backend(t), dir, tok, cacheDir, qwen3vl.Options{HiddenStateIndex: 99}); err == nil {
		t.Error("index past the last layer: want an error")
	}
	if _, err := a.Condition(context.Background(), ""); err == nil {
		t.Error("empty prompt: want an error")
	}
}
