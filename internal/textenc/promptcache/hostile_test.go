package promptcache

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"fastvideo/internal/testutil/fifotest"
)

// A FIFO in place of an entry is a miss at once, and stays: it is not the cache's to remove.
func TestFIFOEntryIsAMiss(t *testing.T) {
	c, w := newCache(t)
	key := testKey()
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fifotest.Make(t, c.Path(key))
	if fifotest.Within(t, time.Second, func() bool { _, _, ok := c.Get(key); return ok }) {
		t.Fatal("a FIFO was a hit")
	}
	if st, err := os.Lstat(c.Path(key)); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was removed or replaced: %v", err)
	}
	if w.n() != 1 {
		t.Fatalf("%d warnings, want 1", w.n())
	}
}

// entryClaiming builds an entry whose header claims shape but carries only a few payload bytes.
func entryClaiming(key Key, shape []int) []byte {
	hb, _ := json.Marshal(header{Key: key.Hash(), Shape: shape, DType: "float32", PayloadBytes: 4 * int64(shape[0])}) // a plain struct always marshals
	out := append(magic[:], binary.LittleEndian.AppendUint32(nil, uint32(len(hb)))...)
	return append(append(out, hb...), 1, 2, 3, 4)
}

// A header claiming 2^31-1 values in a tiny file is refused before the 8 GiB payload buffer
// is allocated.
func TestClaimedShapeIsCheckedAgainstFileSize(t *testing.T) {
	c, _ := newCache(t)
	key := testKey()
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Path(key), entryClaiming(key, []int{2147483647}), 0o600); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, ok := c.Get(key)
	runtime.ReadMemStats(&after)
	if ok {
		t.Fatal("a truncated entry was a hit")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("reading a %d-byte entry allocated %d bytes", len(entryClaiming(key, []int{2147483647})), grew)
	}
}

// Temp files older than StaleTempAge, left by a writer that died, go when the folder is first
// used; younger ones may belong to a live writer and stay.
func TestStaleTempFilesAreSweptOnFirstUse(t *testing.T) {
	c, _ := newCache(t)
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(c.Dir, tempPrefix+"stale"), filepath.Join(c.Dir, tempPrefix+"fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * StaleTempAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	c.Get(testKey())
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file removed: %v", err)
	}
}

// FuzzDecodeEntry drives the on-disk entry decoder with arbitrary files: it never panics,
// never allocates beyond what the file holds, and what it accepts is consistent.
func FuzzDecodeEntry(f *testing.F) {
	key := testKey()
	good, err := encode(key.Hash(), ramp(6, 1), []int{2, 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte(nil), good...), 0))
	f.Add(entryClaiming(key, []int{2147483647}))
	f.Add(magic[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		values, shape, why := decode(bytes.NewReader(data), int64(len(data)), key.Hash())
		if why != "" {
			return
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		if len(shape) == 0 || n != len(values) || 4*len(values) > len(data) {
			t.Fatalf("accepted shape %v with %d values from %d bytes", shape, len(values), len(data))
		}
		again, err := encode(key.Hash(), values, shape)
		if err != nil {
			t.Fatalf("re-encoding an accepted entry: %v", err)
		}
		if v2, s2, why := decode(bytes.NewReader(again), int64(len(again)), key.Hash()); why != "" || len(v2) != len(values) || len(s2) != len(shape) {
			t.Fatalf("re-encoded entry does not decode: %s", why)
		}
	})
}

// A shape whose product wraps (2^32 x 2^32 is 0 modulo 2^64) does not pass for empty data.
func TestPutRejectsWrappingShape(t *testing.T) {
	c, _ := newCache(t)
	if err := c.Put(testKey(), nil, []int{1 << 32, 1 << 32}); err == nil {
		t.Fatal("stored an entry whose shape wraps to zero values")
	}
	if err := c.Put(testKey(), nil, []int{1 << 40, 0}); err != nil {
		t.Fatalf("an honest empty shape: %v", err)
	}
}
