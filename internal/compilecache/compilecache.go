// Package compilecache keeps compiled XLA executables on disk between processes, so that a second
// run of the same program loads it instead of compiling it again (a fresh FastH3 run spends most of
// its first minute compiling). It knows nothing of XLA: entries are opaque bytes under a key that the
// caller derives from everything that changes the compiled result (the GPU build's go-xla patch,
// bench/goxla-compilecache.patch, hashes the program, the compile options, the plugin's version, the
// device kinds and XLA_FLAGS into it).
//
// Layout of a cache folder DIR:
//
//	DIR/executables/<sha256(key) in hex>.xla   one entry per key (format below)
//	DIR/autotune/                              XLA's per-fusion autotune cache (--xla_gpu_per_fusion_autotune_cache_dir)
//
// Files on disk are untrusted: a truncated, bit-flipped or foreign entry (another key's, a hash
// collision) is detected, reported through the caller's warning function, removed and treated as a
// miss; sizes are checked before anything is allocated, and only regular files are opened. Writes go
// to a temporary file in the same folder renamed into place, so a reader never sees half an entry
// and concurrent writers of one key leave one whole entry. Nothing here panics or fails a compile:
// the worst a broken cache costs is the compile it would have saved.
package compilecache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"fastvideo/internal/safefile"
)

// Off is the folder value that turns the cache off (the -compile-cache flag's and
// fastvideo.WithCompileCache's).
const Off = "off"

// Subfolders of a cache folder.
const (
	ExecutablesDir = "executables"
	AutotuneDir    = "autotune"
)

// DefaultMaxEntry bounds an entry read from disk: the largest executable accepted. A fused H3 DiT
// group compiles to tens of MiB; anything near this is not ours.
const DefaultMaxEntry = 4 << 30

// Entry format, little endian:
//
//	magic    8 bytes  "FVXLAEX\x00"
//	version  uint32   formatVersion
//	reserved uint32   0
//	key      32 bytes sha256 of the caller's key (a foreign entry or a file-name collision differs)
//	length   uint64   payload bytes
//	checksum 32 bytes sha256 of the payload
//	payload  length bytes
const (
	magic         = "FVXLAEX\x00"
	formatVersion = 1
	headerSize    = 8 + 4 + 4 + 32 + 8 + 32
)

// Cache is one cache folder. It is safe for concurrent use.
type Cache struct {
	dir  string
	warn func(error)
	// MaxEntry bounds the entries read (DefaultMaxEntry when 0); larger files are reported and removed.
	MaxEntry int64

	hits, misses, stores, rejected atomic.Int64
	warnedOnce                     sync.Map // kinds of warning given once per cache (store and serialize failures)
}

// Stats count what a cache did.
type Stats struct {
	// Hits loaded an executable; Misses compiled (a rejected entry counts as a miss too);
	// Stores wrote an entry; Rejected entries were corrupt, foreign or did not load.
	Hits, Misses, Stores, Rejected int64
}

// New returns the cache in dir (created on the first store). warn receives every problem (nil: they
// are dropped); none of them is fatal.
func New(dir string, warn func(error)) *Cache {
	if warn == nil {
		warn = func(error) {}
	}
	return &Cache{dir: dir, warn: warn}
}

// Dir is the cache folder.
func (c *Cache) Dir() string { return c.dir }

// Stats returns the counts so far.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Stores: c.stores.Load(), Rejected: c.rejected.Load()}
}

// Path is the entry file of key.
func (c *Cache) Path(key []byte) string {
	sum := sha256.Sum256(key)
	return filepath.Join(c.dir, ExecutablesDir, hex.EncodeToString(sum[:])+".xla")
}

// Load returns the payload stored under key. A missing entry is a quiet miss; a bad one is reported,
// removed and a miss.
func (c *Cache) Load(key []byte) ([]byte, bool) {
	path := c.Path(key)
	data, err := c.read(path, key)
	if err == nil {
		return data, true
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	c.reject(path, err)
	return nil, false
}

// reject reports a bad entry and removes it (a folder in its place is only reported).
func (c *Cache) reject(path string, err error) {
	c.rejected.Add(1)
	msg := "removed it"
	if st, serr := os.Lstat(path); serr == nil && st.IsDir() {
		msg = "remove that folder to cache this program"
	} else if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		msg = "could not remove it: " + rerr.Error()
	}
	c.warn(fmt.Errorf("compile cache: entry %s: %w; compiling again (%s)", path, err, msg))
}

// read reads and verifies one entry.
func (c *Cache) read(path string, key []byte) ([]byte, error) {
	limit := c.MaxEntry
	if limit <= 0 {
		limit = DefaultMaxEntry
	}
	data, err := safefile.ReadFile(path, headerSize+limit)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("a program over the %d-byte limit (%w)", limit, err)
	}
	if err != nil {
		return nil, err
	}
	if len(data) < headerSize {
		return nil, fmt.Errorf("truncated: %d bytes, shorter than the %d-byte header", len(data), headerSize)
	}
	n, sum, err := checkHeader(data[:headerSize], key)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("its header declares %d bytes, over the %d-byte limit", n, limit)
	}
	if want := uint64(headerSize) + n; uint64(len(data)) != want {
		return nil, fmt.Errorf("truncated or padded: %d bytes, the header declares %d", len(data), want)
	}
	payload := data[headerSize:]
	if got := sha256.Sum256(payload); !bytes.Equal(got[:], sum) {
		return nil, errors.New("checksum mismatch (a corrupted file)")
	}
	return payload, nil
}

// checkHeader verifies magic, version and key, and returns the payload length and checksum.
func checkHeader(h, key []byte) (uint64, []byte, error) {
	if string(h[:8]) != magic {
		return 0, nil, errors.New("not a compile cache entry (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != formatVersion {
		return 0, nil, fmt.Errorf("format version %d, this binary reads %d", v, formatVersion)
	}
	want := sha256.Sum256(key)
	if !bytes.Equal(h[16:48], want[:]) {
		return 0, nil, errors.New("it belongs to another key (a foreign or colliding entry)")
	}
	return binary.LittleEndian.Uint64(h[48:]), h[56:88], nil
}

// encode builds an entry.
func encode(key, payload []byte) []byte {
	h := make([]byte, headerSize, headerSize+len(payload))
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[8:], formatVersion)
	k := sha256.Sum256(key)
	copy(h[16:], k[:])
	binary.LittleEndian.PutUint64(h[48:], uint64(len(payload)))
	s := sha256.Sum256(payload)
	copy(h[56:], s[:])
	return append(h, payload...)
}

// Store writes payload under key atomically. A failure (a read-only folder, a full disk) is reported
// once per cache and otherwise ignored.
func (c *Cache) Store(key, payload []byte) {
	if err := c.store(key, payload); err != nil {
		c.warnOnce("store", fmt.Errorf("compile cache: storing in %s: %w; programs compile again in the next process (fix the folder, choose another with -compile-cache DIR, or turn it off with -compile-cache off)", c.dir, err))
		return
	}
	c.stores.Add(1)
}

func (c *Cache) store(key, payload []byte) error {
	path := c.Path(key)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return safefile.WriteAtomic(path, encode(key, payload))
}

// warnOnce reports err the first time a warning of this kind happens.
func (c *Cache) warnOnce(kind string, err error) {
	if _, seen := c.warnedOnce.LoadOrStore(kind, true); !seen {
		c.warn(err)
	}
}

// Compile is the hook the patched go-xla calls for every program (through the anonymous interface
// internal/backend installs): load the entry of key with load; when there is none or it does not
// load, compile, then serialize the result and store it. Only compile's error is returned: a cache
// that cannot load, serialize or store costs a compile, never a failure. A panic in load or
// serialize is caught and reported the same way.
func (c *Cache) Compile(key []byte, load func(serialized []byte) error, compile func() error, serialize func() ([]byte, error)) error {
	if data, ok := c.Load(key); ok {
		err := guard(func() error { return load(data) })
		if err == nil {
			c.hits.Add(1)
			return nil
		}
		c.reject(c.Path(key), fmt.Errorf("it did not load: %w", err))
	}
	c.misses.Add(1)
	if err := compile(); err != nil {
		return err
	}
	var data []byte
	err := guard(func() (err error) { data, err = serialize(); return err })
	if err != nil {
		c.warnOnce("serialize", fmt.Errorf("compile cache: the PJRT plugin did not serialize an executable (%w); programs are not cached", err))
		return nil
	}
	c.Store(key, data)
	return nil
}

// guard runs f, turning a panic into an error.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// Check says whether dir can serve as a cache folder without creating anything: it must be a folder
// (or not exist yet, below a folder) that this process can write. The error says what is wrong.
func Check(dir string) error {
	if dir == "" {
		return errors.New("empty folder name")
	}
	p := filepath.Clean(dir)
	for {
		st, err := os.Stat(p)
		switch {
		case err == nil && !st.IsDir():
			if p == filepath.Clean(dir) {
				return fmt.Errorf("%s is a file, not a folder", p)
			}
			return fmt.Errorf("%s cannot be created: %s is a file, not a folder", dir, p)
		case err == nil:
			return probeWrite(p)
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("%s: no existing parent folder", dir)
		}
		p = parent
	}
}

// probeWrite creates and removes a file in dir.
func probeWrite(dir string) error {
	if err := safefile.ProbeWrite(dir); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}
