package promptcache

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func testKey() Key {
	return Key{Tokenizer: "tok-1", Model: "model-1", Prompt: "(S1) A presenter says <d>[English] Fast H3 is amazing.</d>", Layer: 50, DType: "bfloat16"}
}

func ramp(n int, base float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = base + float32(i)*0.25
	}
	return v
}

type warnings struct {
	mu   sync.Mutex
	errs []error
}

func (w *warnings) add(err error) { w.mu.Lock(); w.errs = append(w.errs, err); w.mu.Unlock() }
func (w *warnings) n() int        { w.mu.Lock(); defer w.mu.Unlock(); return len(w.errs) }

func newCache(t *testing.T) (*Cache, *warnings) {
	w := &warnings{}
	return &Cache{Dir: filepath.Join(t.TempDir(), "prompts"), Warn: w.add}, w
}

func TestRoundTrip(t *testing.T) {
	c, w := newCache(t)
	k := testKey()
	if _, _, ok := c.Get(k); ok {
		t.Fatal("empty cache: got a hit")
	}
	data := ramp(3*5, -1)
	data[4] = float32(math.Inf(-1))
	data[7] = float32(math.Copysign(0, -1))
	if err := c.Put(k, data, []int{3, 5}); err != nil {
		t.Fatal(err)
	}
	got, shape, ok := c.Get(k)
	if !ok || len(shape) != 2 || shape[0] != 3 || shape[1] != 5 {
		t.Fatalf("hit %v shape %v", ok, shape)
	}
	for i := range data {
		if math.Float32bits(got[i]) != math.Float32bits(data[i]) {
			t.Fatalf("value %d: %v, want %v", i, got[i], data[i])
		}
	}
	if w.n() != 0 {
		t.Errorf("warnings: %v", w.errs)
	}
	if err := c.Put(k, data, []int{4, 5}); err == nil {
		t.Error("shape/length mismatch: want an error")
	}
	if err := (&Cache{}).Put(k, data, []int{15}); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Errorf("empty Dir: got %v", err)
	}
}

func TestKeyFieldsAllMatter(t *testing.T) {
	base := testKey()
	variants := []Key{base, base, base, base, base, base}
	variants[0].Tokenizer += "x"
	variants[1].Model += "x"
	variants[2].Prompt += " "
	variants[3].Layer++
	variants[4].DType = "float32"
	variants[5].Variant = "final_norm"
	seen := map[string]int{base.Hash(): -1}
	for i, v := range variants {
		h := v.Hash()
		if j, dup := seen[h]; dup {
			t.Errorf("variant %d hashes like %d", i, j)
		}
		seen[h] = i
	}
	// Moving text between fields must change the hash.
	a := Key{Tokenizer: "ab", Model: "c"}
	b := Key{Tokenizer: "a", Model: "bc"}
	if a.Hash() == b.Hash() {
		t.Error("field boundaries are not part of the hash")
	}
}

func TestCorruptEntriesAreRecomputed(t *testing.T) {
	data := ramp(70*8, 0.5)
	shape := []int{70, 8}
	img, err := encode(testKey().Hash(), data, shape)
	if err != nil {
		t.Fatal(err)
	}
	hlen := int(uint32(img[8]) | uint32(img[9])<<8)
	damage := map[string]func([]byte) []byte{
		"empty":             func(b []byte) []byte { return b[:0] },
		"truncated magic":   func(b []byte) []byte { return b[:5] },
		"truncated header":  func(b []byte) []byte { return b[:12+hlen/2] },
		"truncated payload": func(b []byte) []byte { return b[:len(b)-1] },
		"trailing bytes":    func(b []byte) []byte { return append(b, 0) },
		"payload bit flip":  func(b []byte) []byte { b[len(b)-3] ^= 0x10; return b },
		"bad magic":         func(b []byte) []byte { b[0] = 'X'; return b },
		"shape edited": func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"shape":[70,8]`, `"shape":[71,8]`, 1))
		},
		"header garbled": func(b []byte) []byte { b[14] = '}'; return b },
	}
	for name, fn := range damage {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			c, w := newCache(t)
			k := testKey()
			if err := os.MkdirAll(c.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(c.Path(k), fn(append([]byte(nil), img...)), 0o644); err != nil {
				t.Fatal(err)
			}
			calls := 0
			got, _, hit, err := c.GetOrCompute(context.Background(), k, func(context.Context) ([]float32, []int, error) {
				calls++
				return data, shape, nil
			})
			if err != nil || hit || calls != 1 {
				t.Fatalf("corrupt entry: hit=%v calls=%d err=%v; want a recompute", hit, calls, err)
			}
			if w.n() != 1 || !strings.Contains(w.errs[0].Error(), "corrupt") {
				t.Errorf("want one 'corrupt' warning, got %v", w.errs)
			}
			if got[5] != data[5] {
				t.Error("recomputed data not returned")
			}
			// The recomputed entry replaced the corrupt one.
			if _, _, ok := c.Get(k); !ok {
				t.Error("entry not rewritten after the recompute")
			}
		})
	}
}

func TestEntryUnderWrongNameIsRejected(t *testing.T) {
	c, w := newCache(t)
	a, b := testKey(), testKey()
	b.Prompt = "another prompt"
	if err := c.Put(a, ramp(8, 1), []int{2, 4}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(c.Path(a), c.Path(b)); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Get(b); ok {
		t.Fatal("an entry written for another key was trusted")
	}
	if _, err := os.Stat(c.Path(b)); !errors.Is(err, os.ErrNotExist) || w.n() != 1 {
		t.Errorf("mislabelled entry not removed (stat %v, warnings %v)", err, w.errs)
	}
}

// Writers race on one key with different payloads while readers poll it: every
// read must be a miss or one writer's complete payload, never a torn mix, and no
// read may find a corrupt file.
func TestConcurrentWritersAndReaders(t *testing.T) {
	c, w := newCache(t)
	k := testKey()
	const writers, puts, n = 6, 15, 70 * 16
	payload := func(id int) []float32 { return ramp(n, float32(1000*id)) }
	var wg sync.WaitGroup
	done := make(chan struct{})
	var readerErrs []string
	var mu sync.Mutex
	hits := 0
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				got, shape, ok := c.Get(k)
				if !ok {
					continue
				}
				id := int(got[0] / 1000)
				want := payload(id)
				bad := len(got) != n || shape[0] != 70 || shape[1] != 16
				for i := 0; !bad && i < n; i++ {
					bad = got[i] != want[i]
				}
				mu.Lock()
				hits++
				if bad {
					readerErrs = append(readerErrs, "torn or mixed entry")
				}
				mu.Unlock()
			}
		}()
	}
	var ww sync.WaitGroup
	for id := 1; id <= writers; id++ {
		ww.Add(1)
		go func(id int) {
			defer ww.Done()
			for i := 0; i < puts; i++ {
				if err := c.Put(k, payload(id), []int{70, 16}); err != nil {
					mu.Lock()
					readerErrs = append(readerErrs, err.Error())
					mu.Unlock()
				}
			}
		}(id)
	}
	ww.Wait()
	close(done)
	wg.Wait()
	if len(readerErrs) > 0 || w.n() > 0 {
		t.Fatalf("errors: %v; warnings: %v", readerErrs, w.errs)
	}
	if _, _, ok := c.Get(k); !ok {
		t.Fatal("final entry missing")
	}
	ents, _ := os.ReadDir(c.Dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("cache folder holds %v; want only the entry (no temp files left)", names)
	}
	t.Logf("%d concurrent reads hit a complete entry", hits)
}

func TestCleanTemp(t *testing.T) {
	c, _ := newCache(t)
	if err := c.CleanTemp(time.Hour); err != nil {
		t.Fatalf("missing folder: %v", err)
	}
	os.MkdirAll(c.Dir, 0o755)
	old := filepath.Join(c.Dir, tempPrefix+"old")
	young := filepath.Join(c.Dir, tempPrefix+"young")
	os.WriteFile(old, []byte("x"), 0o644)
	os.WriteFile(young, []byte("x"), 0o644)
	past := time.Now().Add(-2 * time.Hour)
	os.Chtimes(old, past, past)
	if err := c.CleanTemp(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Error("old temp file kept")
	}
	if _, err := os.Stat(young); err != nil {
		t.Error("young temp file removed")
	}
}

func TestFolderIdentity(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", `{"a":1}`)
	write("model-00001-of-00002.safetensors", "0123")
	id1, err := FolderIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := FolderIdentity(dir)
	if id1 != id2 {
		t.Fatal("identity is not stable")
	}
	write("config.json", `{"a":2}`)
	id3, _ := FolderIdentity(dir)
	write("model-00001-of-00002.safetensors", "01234")
	id4, _ := FolderIdentity(dir)
	if id3 == id1 || id4 == id3 {
		t.Errorf("identity ignores a changed config (%v) or shard (%v)", id3 == id1, id4 == id3)
	}
	if _, err := FolderIdentity(filepath.Join(dir, "nope")); err == nil {
		t.Error("missing folder: want an error")
	}
}
