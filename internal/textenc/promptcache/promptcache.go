// Package promptcache stores text-encoder hidden states on disk, keyed by
// everything that determines them, so a repeated prompt skips the conditioner
// (tens of seconds and a 66 GB checkpoint stream for MiniMax H3).
//
// An entry is written to a temp file in the cache folder and renamed into place,
// so readers see either no file or a complete one, whatever the number of
// concurrent writers. Each entry carries a SHA-256 of its payload and the key it
// was written for; an entry that fails either check (truncated, bit-flipped,
// renamed) is treated as a miss and removed, never trusted.
package promptcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"fastvideo/internal/safefile"
)

// Key is what a cached hidden state depends on. Every field is part of the hash.
type Key struct {
	// Tokenizer fingerprints the tokenizer (vocabulary, merges, normalization).
	Tokenizer string
	// Model identifies the encoder weights and config, e.g. FolderIdentity.
	Model string
	// Prompt is the text as given to the tokenizer.
	Prompt string
	// Layer is the hidden-state index returned (50 for MiniMax H3).
	Layer int
	// DType is the compute dtype of the encoder ("float32", "bfloat16").
	DType string
	// Variant separates anything else that changes the result (e.g. "final_norm").
	Variant string
}

// version is mixed into every hash: bump it when the meaning of an entry changes.
const version = "fastvideo-promptcache-v1"

// Hash is the entry name: hex SHA-256 over the length-prefixed fields, so no two
// different keys can collide by moving text between fields.
func (k Key) Hash() string {
	h := sha256.New()
	for _, f := range []string{version, k.Tokenizer, k.Model, k.Prompt, fmt.Sprint(k.Layer), k.DType, k.Variant} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Cache is a folder of entries. The zero value is unusable; set Dir.
type Cache struct {
	// Dir holds the entries; it is created on the first Put.
	Dir string
	// Warn, if set, receives problems that do not fail the caller: a corrupt entry
	// that was removed, a write that failed in GetOrCompute.
	Warn func(error)
}

// magic starts every entry file.
var magic = [8]byte{'F', 'V', 'P', 'C', 'A', 'C', 'H', '1'}

// maxHeader bounds the JSON header read from disk.
const maxHeader = 1 << 16

type header struct {
	Key           string `json:"key"`
	Shape         []int  `json:"shape"`
	DType         string `json:"dtype"` // of the payload: always float32 little-endian
	PayloadBytes  int64  `json:"payload_bytes"`
	PayloadSHA256 string `json:"payload_sha256"`
	Created       string `json:"created,omitempty"`
}

// Path is the file of key's entry.
func (c *Cache) Path(key Key) string { return filepath.Join(c.Dir, key.Hash()+".fvpc") }

// Get returns the cached hidden state of key and its shape. A missing, unreadable
// or corrupt entry is a miss; a corrupt one is removed so that it is recomputed.
func (c *Cache) Get(key Key) ([]float32, []int, bool) {
	c.sweepOnce()
	data, shape, err := c.read(key)
	if err == nil {
		return data, shape, true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		c.warn(err)
	}
	return nil, nil, false
}

// corruptError marks an entry whose content failed validation.
type corruptError struct {
	path string
	why  string
}

func (e *corruptError) Error() string {
	return fmt.Sprintf("promptcache: entry %s is corrupt (%s); removed, it will be recomputed", e.path, e.why)
}

func (c *Cache) read(key Key) ([]float32, []int, error) {
	path := c.Path(key)
	// A FIFO or device in place of an entry is refused without blocking and left alone: it
	// is not ours to remove.
	f, err := safefile.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, shape, why := decode(f, st.Size(), key.Hash())
	if why == "" {
		return data, shape, nil
	}
	// Remove only the file we read: a writer may have renamed a good entry over
	// it in the meantime, and that one must stay.
	if cur, err := os.Stat(path); err == nil && os.SameFile(st, cur) {
		os.Remove(path)
	}
	return nil, nil, &corruptError{path, why}
}

// decode validates and reads one entry of size bytes; why is empty on success. Every length
// the entry claims is checked against size before anything is allocated for it.
func decode(r io.Reader, size int64, wantKey string) (data []float32, shape []int, why string) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, nil, "truncated before the header"
	}
	if !bytes.Equal(pre[:8], magic[:]) {
		return nil, nil, "bad magic"
	}
	hlen := binary.LittleEndian.Uint32(pre[8:])
	if hlen == 0 || hlen > maxHeader || int64(hlen) > size-12 {
		return nil, nil, fmt.Sprintf("header length %d out of range for a %d-byte file", hlen, size)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, nil, "truncated header"
	}
	var h header
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, nil, "header is not valid JSON"
	}
	if h.Key != wantKey {
		return nil, nil, fmt.Sprintf("written for key %.12s…, not %.12s…", h.Key, wantKey)
	}
	if h.DType != "float32" {
		return nil, nil, fmt.Sprintf("payload dtype %q", h.DType)
	}
	n, ok := shapeProduct(h.Shape)
	if !ok || n > math.MaxInt32 {
		return nil, nil, fmt.Sprintf("shape %v out of range", h.Shape)
	}
	if len(h.Shape) == 0 || 4*int64(n) != h.PayloadBytes {
		return nil, nil, fmt.Sprintf("shape %v does not match %d payload bytes", h.Shape, h.PayloadBytes)
	}
	if rest := size - 12 - int64(hlen); h.PayloadBytes != rest {
		return nil, nil, fmt.Sprintf("header claims %d payload bytes but the file holds %d after it", h.PayloadBytes, rest)
	}
	payload := make([]byte, h.PayloadBytes)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, nil, "truncated payload"
	}
	var extra [1]byte
	if k, _ := r.Read(extra[:]); k != 0 {
		return nil, nil, "trailing bytes after the payload"
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != h.PayloadSHA256 {
		return nil, nil, "payload checksum mismatch"
	}
	data = make([]float32, n)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:]))
	}
	return data, h.Shape, ""
}

// shapeProduct is the number of values of shape, computed without wrapping; ok is false for a
// negative dimension or a product beyond MaxInt.
func shapeProduct(shape []int) (n int, ok bool) {
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
	}
	if slices.Contains(shape, 0) {
		return 0, true
	}
	n = 1
	for _, d := range shape {
		if n > math.MaxInt/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// encode builds an entry file image.
func encode(keyHash string, data []float32, shape []int) ([]byte, error) {
	n, ok := shapeProduct(shape)
	if !ok {
		return nil, fmt.Errorf("promptcache: shape %v has a negative dimension or too many values", shape)
	}
	if len(shape) == 0 || n != len(data) {
		return nil, fmt.Errorf("promptcache: shape %v holds %d values but %d were given", shape, n, len(data))
	}
	payload := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(payload[4*i:], math.Float32bits(v))
	}
	sum := sha256.Sum256(payload)
	hb, err := json.Marshal(header{
		Key: keyHash, Shape: shape, DType: "float32", PayloadBytes: int64(len(payload)),
		PayloadSHA256: hex.EncodeToString(sum[:]), Created: time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 12+len(hb)+len(payload))
	out = append(out, magic[:]...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	return append(out, payload...), nil
}

// tempPrefix starts the names of entries being written.
const tempPrefix = ".tmp-"

// Put stores data (float32, row-major with the given shape) under key: written to
// a temp file in Dir, synced, then renamed over the entry, so concurrent writers
// and readers never see a torn file.
func (c *Cache) Put(key Key, data []float32, shape []int) error {
	if c.Dir == "" {
		return fmt.Errorf("promptcache: Cache.Dir is empty; set it to a writable folder")
	}
	img, err := encode(key.Hash(), data, shape)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("promptcache: %w", err)
	}
	c.sweepOnce()
	tmp, err := os.CreateTemp(c.Dir, tempPrefix+key.Hash()[:16]+"-*")
	if err != nil {
		return fmt.Errorf("promptcache: %w", err)
	}
	name := tmp.Name()
	_, werr := tmp.Write(img)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(name)
		return fmt.Errorf("promptcache: writing %s: %w", name, err)
	}
	if err := os.Rename(name, c.Path(key)); err != nil {
		os.Remove(name)
		return fmt.Errorf("promptcache: %w", err)
	}
	return nil
}

// GetOrCompute returns the cached entry of key, or runs compute and stores its
// result. hit reports a cache hit. A failed store does not fail the call (the
// result is still good); it goes to Warn.
func (c *Cache) GetOrCompute(ctx context.Context, key Key, compute func(context.Context) ([]float32, []int, error)) (data []float32, shape []int, hit bool, err error) {
	if data, shape, ok := c.Get(key); ok {
		return data, shape, true, nil
	}
	data, shape, err = compute(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	if perr := c.Put(key, data, shape); perr != nil {
		c.warn(perr)
	}
	return data, shape, false, nil
}

// Remove deletes key's entry (no error if it does not exist).
func (c *Cache) Remove(key Key) error {
	if err := os.Remove(c.Path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("promptcache: %w", err)
	}
	return nil
}

// StaleTempAge is the age beyond which a temp file is taken for the leftover of a writer that
// died (an entry is written in well under a minute), and removed when a folder is first used.
const StaleTempAge = time.Hour

// swept records the folders whose stale temp files this process has removed already.
var swept sync.Map

// sweepOnce removes stale temp files the first time this process uses c.Dir.
func (c *Cache) sweepOnce() {
	if c.Dir == "" {
		return
	}
	if _, done := swept.LoadOrStore(c.Dir, true); done {
		return
	}
	if err := c.CleanTemp(StaleTempAge); err != nil {
		c.warn(err)
	}
}

// CleanTemp removes temp files older than age, left by writers that crashed
// between create and rename. Younger ones may belong to a writer still running.
func (c *Cache) CleanTemp(age time.Duration) error {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("promptcache: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < age {
			continue
		}
		if err := os.Remove(filepath.Join(c.Dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Cache) warn(err error) {
	if c.Warn != nil {
		c.Warn(err)
	}
}

// maxConfigBytes bounds each JSON file FolderIdentity reads: configs and shard indexes are
// kilobytes to a few megabytes.
const maxConfigBytes = 64 << 20

// FolderIdentity fingerprints a model folder without reading its weights: the
// bytes of its JSON files (config.json, index, ...) and the name, size and
// modification time of every other regular file in it. Replacing, rewriting or
// re-downloading a shard changes the identity, so stale entries are never hit.
func FolderIdentity(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("promptcache: model folder: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", version)
	for _, name := range names {
		path := filepath.Join(dir, name)
		st, err := os.Stat(path) // follows links: HF caches link shards into blobs
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if strings.HasSuffix(name, ".json") {
			b, err := safefile.ReadFile(path, maxConfigBytes)
			if err != nil {
				return "", fmt.Errorf("promptcache: %w", err)
			}
			sum := sha256.Sum256(b)
			fmt.Fprintf(h, "json %s %x\x00", name, sum)
			continue
		}
		fmt.Fprintf(h, "file %s %d %d\x00", name, st.Size(), st.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
