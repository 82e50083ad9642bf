package compilecache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// recorder collects warnings.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) warn(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, err.Error())
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

func newCache(t *testing.T) (*Cache, *recorder) {
	t.Helper()
	r := &recorder{}
	return New(t.TempDir(), r.warn), r
}

func TestRoundTrip(t *testing.T) {
	c, r := newCache(t)
	key, payload := []byte("program A"), []byte("serialized executable A")
	if _, ok := c.Load(key); ok {
		t.Fatal("hit on an empty cache")
	}
	c.Store(key, payload)
	got, ok := c.Load(key)
	if !ok || !bytes.Equal(got, payload) {
		t.Fatalf("got %q %v", got, ok)
	}
	c.Store(key, nil) // an empty payload is an entry too
	if got, ok := c.Load(key); !ok || len(got) != 0 {
		t.Fatalf("empty payload: %q %v", got, ok)
	}
	if r.all() != "" {
		t.Fatalf("warnings: %s", r.all())
	}
	if !strings.HasPrefix(c.Path(key), filepath.Join(c.Dir(), ExecutablesDir)+string(filepath.Separator)) {
		t.Fatalf("entry outside %s: %s", ExecutablesDir, c.Path(key))
	}
}

// Every kind of damage is detected, reported, removed and a miss; the next store repairs it.
func TestDamagedEntries(t *testing.T) {
	key, payload := []byte("program"), bytes.Repeat([]byte("x"), 1000)
	for _, d := range []struct {
		name   string
		damage func(path string, entry []byte) []byte
		want   string
	}{
		{"truncated payload", func(_ string, e []byte) []byte { return e[:len(e)-1] }, "truncated"},
		{"truncated header", func(_ string, e []byte) []byte { return e[:headerSize-1] }, "truncated"},
		{"empty file", func(_ string, e []byte) []byte { return nil }, "truncated"},
		{"padded", func(_ string, e []byte) []byte { return append(e, 0) }, "padded"},
		{"bit flip in the payload", func(_ string, e []byte) []byte { e[headerSize+500] ^= 4; return e }, "checksum"},
		{"bit flip in the checksum", func(_ string, e []byte) []byte { e[60] ^= 1; return e }, "checksum"},
		{"bit flip in the key", func(_ string, e []byte) []byte { e[20] ^= 1; return e }, "another key"},
		{"bad magic", func(_ string, e []byte) []byte { e[0] = 'X'; return e }, "magic"},
		{"other version", func(_ string, e []byte) []byte { e[8] = 9; return e }, "version"},
		{"huge length", func(_ string, e []byte) []byte { e[48+7] = 0x7f; return e }, "over the"},
		{"foreign entry", func(_ string, _ []byte) []byte { return encode([]byte("another program"), payload) }, "another key"},
	} {
		t.Run(d.name, func(t *testing.T) {
			c, r := newCache(t)
			c.Store(key, payload)
			path := c.Path(key)
			entry, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, d.damage(path, entry), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.Load(key); ok {
				t.Fatal("a damaged entry was a hit")
			}
			if w := r.all(); !strings.Contains(w, d.want) || !strings.Contains(w, path) {
				t.Fatalf("warning %q lacks %q or the path", w, d.want)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the damaged entry was not removed: %v", err)
			}
			if c.Stats().Rejected != 1 {
				t.Fatalf("stats %+v", c.Stats())
			}
			c.Store(key, payload)
			if got, ok := c.Load(key); !ok || !bytes.Equal(got, payload) {
				t.Fatal("the store after a rejection did not repair the entry")
			}
		})
	}
}

// An entry larger than MaxEntry is refused before its payload is allocated.
func TestMaxEntry(t *testing.T) {
	c, r := newCache(t)
	c.Store([]byte("k"), make([]byte, 100))
	c.MaxEntry = 99
	if _, ok := c.Load([]byte("k")); ok || !strings.Contains(r.all(), "over the 99-byte limit") {
		t.Fatalf("ok %v, warnings %q", ok, r.all())
	}
}

// A folder where an entry should be: reported as a miss, left alone, and the store fails with a warning.
func TestFolderInPlaceOfEntry(t *testing.T) {
	c, r := newCache(t)
	key := []byte("k")
	if err := os.MkdirAll(filepath.Join(c.Path(key), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Load(key); ok {
		t.Fatal("a folder was a hit")
	}
	if !strings.Contains(r.all(), "a folder") {
		t.Fatalf("warnings %q", r.all())
	}
	c.Store(key, []byte("p"))
	if !strings.Contains(r.all(), "compile cache: storing") {
		t.Fatalf("store into a folder's place did not warn: %q", r.all())
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(filepath.Dir(c.Path(key)))
	if len(ents) != 1 {
		t.Fatalf("left %d entries", len(ents))
	}
}

// A non-regular file (a FIFO) is refused at once, never waited on.
func TestFIFO(t *testing.T) {
	c, r := newCache(t)
	key := []byte("k")
	os.MkdirAll(filepath.Dir(c.Path(key)), 0o755)
	if err := mkfifo(c.Path(key)); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	if _, ok := c.Load(key); ok || !strings.Contains(r.all(), "not a regular file") {
		t.Fatalf("ok %v, warnings %q", ok, r.all())
	}
}

// A read-only folder: the store warns once and nothing fails.
func TestReadOnlyFolder(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only folders")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	r := &recorder{}
	c := New(filepath.Join(dir, "cache"), r.warn)
	c.Store([]byte("a"), []byte("1"))
	c.Store([]byte("b"), []byte("2"))
	if n := strings.Count(r.all(), "compile cache: storing"); n != 1 {
		t.Fatalf("%d store warnings, want 1: %q", n, r.all())
	}
	if err := Check(filepath.Join(dir, "cache")); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("Check: %v", err)
	}
}

// A cache folder that cannot be created (a file on its path; what a read-only folder gives root):
// stores warn once, loads miss quietly, nothing fails.
func TestUncreatableFolder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	r := &recorder{}
	c := New(filepath.Join(file, "cache"), r.warn)
	f := &fakeExec{program: "p"}
	for range 2 {
		if err := f.run(c); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(r.all(), "compile cache: storing"); n != 1 || f.compiles != 2 {
		t.Fatalf("%d store warnings, %d compiles: %q", n, f.compiles, r.all())
	}
}

// Stores of one key racing each other leave one whole entry, and no temporary files.
func TestConcurrentStores(t *testing.T) {
	c, r := newCache(t)
	key := []byte("same program")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Store(key, bytes.Repeat([]byte{byte(i)}, 1<<16))
			c.Load(key)
		}()
	}
	wg.Wait()
	got, ok := c.Load(key)
	if !ok || len(got) != 1<<16 || !bytes.Equal(got, bytes.Repeat(got[:1], 1<<16)) {
		t.Fatalf("not one whole entry: ok %v len %d", ok, len(got))
	}
	if r.all() != "" {
		t.Fatalf("warnings: %s", r.all())
	}
	ents, _ := os.ReadDir(filepath.Dir(c.Path(key)))
	if len(ents) != 1 {
		t.Fatalf("%d files, want the entry alone", len(ents))
	}
}

// fakeExec stands for go-xla's side of the hook.
type fakeExec struct {
	compiles, loads int
	loadErr         error
	serializeErr    error
	panicLoad       bool
	program         string
	loaded          string
}

func (f *fakeExec) run(c *Cache) error {
	return c.Compile([]byte(f.program),
		func(b []byte) error {
			if f.panicLoad {
				panic("bad bytes")
			}
			if f.loadErr != nil {
				return f.loadErr
			}
			f.loads++
			f.loaded = string(b)
			return nil
		},
		func() error { f.compiles++; return nil },
		func() ([]byte, error) { return []byte("exe of " + f.program), f.serializeErr })
}

func TestCompileFlow(t *testing.T) {
	c, r := newCache(t)
	f := &fakeExec{program: "p"}
	if err := f.run(c); err != nil || f.compiles != 1 || f.loads != 0 {
		t.Fatalf("first: %v %+v", err, f)
	}
	if err := f.run(c); err != nil || f.compiles != 1 || f.loads != 1 || f.loaded != "exe of p" {
		t.Fatalf("second: %v %+v", err, f)
	}
	if s := c.Stats(); s != (Stats{Hits: 1, Misses: 1, Stores: 1}) {
		t.Fatalf("stats %+v", s)
	}
	// An entry the plugin refuses (another plugin build, say): reported, compiled and stored again.
	f.loadErr = errors.New("PJRT error: incompatible")
	if err := f.run(c); err != nil || f.compiles != 2 {
		t.Fatalf("refused: %v %+v", err, f)
	}
	if !strings.Contains(r.all(), "did not load: PJRT error: incompatible") {
		t.Fatalf("warnings %q", r.all())
	}
	f.loadErr, f.panicLoad = nil, true
	if err := f.run(c); err != nil || f.compiles != 3 || !strings.Contains(r.all(), "panic: bad bytes") {
		t.Fatalf("panicking load: %v %+v %q", err, f, r.all())
	}
	f.panicLoad = false
	if err := f.run(c); err != nil || f.loads != 2 {
		t.Fatalf("after repair: %v %+v", err, f)
	}
}

// A compile error is the caller's; a serialize error only costs the cache (one warning).
func TestCompileErrors(t *testing.T) {
	c, r := newCache(t)
	boom := errors.New("boom")
	err := c.Compile([]byte("k"), func([]byte) error { return nil }, func() error { return boom }, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("compile error lost: %v", err)
	}
	for i := range 3 {
		f := &fakeExec{program: fmt.Sprint(i), serializeErr: errors.New("UNIMPLEMENTED")}
		if err := f.run(c); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(r.all(), "did not serialize"); n != 1 {
		t.Fatalf("%d serialize warnings: %q", n, r.all())
	}
	if c.Stats().Stores != 0 {
		t.Fatalf("stored: %+v", c.Stats())
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct {
		dir, want string
	}{
		{dir, ""},
		{filepath.Join(dir, "new", "deeper"), ""},
		{file, "is a file"},
		{filepath.Join(file, "sub"), "is a file"},
		{"", "empty"},
	} {
		err := Check(c.dir)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Check(%q) = %v, want %q", c.dir, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("Check created a folder")
	}
}
