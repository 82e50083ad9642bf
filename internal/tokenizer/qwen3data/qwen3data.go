// Package qwen3data embeds the Qwen3 byte-level BPE tokenizer (the tokenizer.json of the Qwen3 /
// Qwen3-VL family that MiniMax H3's text encoder uses: 151,643 BPE tokens plus 26 added tokens,
// ids 0..151,668), gzipped (2 MB), so that the built-in tiny-h3 model tokenizes prompts exactly like
// the real one without any file on disk. The tokenizer package's tests read this file too.
package qwen3data

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the tokenizer file
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"fastvideo/internal/safefile"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/tokenizer"
)

//go:embed tokenizer.json.gz
var gz []byte

// Gzip returns the embedded gzipped tokenizer.json. The caller must not modify it.
func Gzip() []byte { return gz }

var (
	loadOnce sync.Once
	loaded   *tokenizer.Tokenizer
	loadErr  error
)

// Load returns the embedded tokenizer (loaded once per process; a Tokenizer is immutable and safe
// for concurrent use). tokenizer.Load reads files, so the embedded bytes are first written, once, to
// the user cache folder (os.UserCacheDir()/fastvideo/tokenizer, else the temp folder) under a name
// carrying their hash; tokenizer.Load then keeps its compiled form beside it, so later processes
// load in milliseconds.
func Load() (*tokenizer.Tokenizer, error) {
	loadOnce.Do(func() {
		var path string
		path, loadErr = materialize()
		if loadErr == nil {
			loaded, loadErr = tokenizer.Load(path)
		}
	})
	return loaded, loadErr
}

// materialize writes the embedded file (if not already there with the same content) and returns
// its path.
func materialize() (string, error) {
	sum := sha256.Sum256(gz)
	name := "qwen3-" + hex.EncodeToString(sum[:8]) + ".json.gz"
	var dirs []string
	if d, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "fastvideo", "tokenizer"))
	}
	dirs = append(dirs, filepath.Join(os.TempDir(), fmt.Sprintf("fastvideo-tokenizer-%d", os.Getuid())))
	var errs []error
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if data, err := safefile.ReadFile(p, int64(len(gz))); err == nil && bytes.Equal(data, gz) {
			return p, nil
		}
		if err := writeAtomic(dir, name, gz); err != nil {
			errs = append(errs, err)
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("qwen3data: cannot write the embedded tokenizer to disk (%v); make the user cache folder or $TMPDIR writable", errs)
}

// writeAtomic writes data to dir/name (dir created if need be) through safetensors.WriteAtomic's
// temp file and rename, so a concurrent reader never sees a partial file.
func writeAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return safetensors.WriteAtomic(filepath.Join(dir, name), data)
}
