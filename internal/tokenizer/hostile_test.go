package tokenizer

import (
	"compress/gzip"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fastvideo/internal/testutil/fifotest"
)

// A FIFO named tokenizer.json is a named error at once.
func TestFIFOTokenizerJSONIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	fifotest.Make(t, p)
	err := fifotest.Within(t, 2*time.Second, func() error { _, err := LoadWith(dir, Options{NoCache: true}); return err })
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("got %v, want a not-a-regular-file error naming %s", err, p)
	}
}

// A FIFO at the cache file's name is a miss: the tokenizer loads from its JSON, and the
// FIFO, not being ours, is left in place.
func TestFIFOCacheFileIsAMiss(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cache := cachePath(dir, sha256.Sum256(raw))
	fifotest.Make(t, cache)
	err = fifotest.Within(t, 2*time.Second, func() error { _, err := LoadWith(flagsDir, Options{CacheDir: dir}); return err })
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(cache); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO at the cache name was replaced or removed: %v", err)
	}
}

// A small gzip file inflating beyond MaxJSONBytes is refused by a bounded read, whose error
// states the bound.
func TestGzipBombIsRefused(t *testing.T) {
	p, size := writeGzipTokenizer(t, gzip.BestSpeed, func(w io.Writer) error {
		chunk := make([]byte, 1<<20)
		for i := int64(0); i <= MaxJSONBytes>>20; i++ {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	})
	_, err := LoadWith(p, Options{NoCache: true})
	if err == nil || !strings.Contains(err.Error(), "at most 64 MiB") {
		t.Fatalf("a %d-byte gzip of %d MiB: got %v, want an error stating the 64 MiB bound", size, MaxJSONBytes>>20+1, err)
	}
}

// A key given twice anywhere in tokenizer.json is refused: with "model" twice the second
// would silently replace the first.
func TestDuplicateKeysAreRefused(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	inModel := strings.Index(doc, `"model"`)
	vocab := strings.Index(doc[inModel:], `"vocab"`) + inModel
	for name, edited := range map[string]string{
		"model":         strings.Replace(doc, `{`, `{"model": {"type": "BPE", "vocab": {}, "merges": []}, `, 1),
		"model.type":    doc[:inModel] + strings.Replace(doc[inModel:], `"type"`, `"type": "BPE", "type"`, 1),
		"a vocab token": doc[:vocab] + strings.Replace(doc[vocab:], `{`, `{"dup": 0, "dup": 1, `, 1),
		"decoder.type":  strings.Replace(doc, `"decoder": {`, `"decoder": {"type": "ByteLevel", `, 1),
	} {
		if edited == doc {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if _, err := compileJSON([]byte(edited), [32]byte{}); err == nil || !strings.Contains(err.Error(), "appears twice") {
			t.Errorf("%s twice: got %v", name, err)
		}
	}
}
