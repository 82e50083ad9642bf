package safefile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fastvideo/internal/testutil/fifotest"
)

func TestOpenRefusesFIFOWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	fifotest.Make(t, fifo)
	errs := fifotest.Within(t, 500*time.Millisecond, func() []error {
		f, openErr := Open(fifo)
		f.Close()
		_, readErr := ReadFile(fifo, 10)
		return []error{openErr, readErr}
	})
	for _, err := range errs {
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "FIFO") || !strings.Contains(err.Error(), fifo) {
			t.Errorf("got %v, want ErrNotRegular naming the FIFO and its path", err)
		}
	}
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a folder: got %v, want ErrNotRegular", err)
	}
}

func TestReadFileBounds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("at the limit: %q, %v", b, err)
	}
	if _, err := ReadFile(p, 9); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "9-byte limit") {
		t.Errorf("over the limit: got %v", err)
	}
	if _, err := ReadAll(bytes.NewReader(make([]byte, 11)), 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadAll over the limit: got %v", err)
	}
}

// WriteAtomic replaces a file whole and leaves no temporary file behind, also when the rename
// fails; ProbeWrite leaves the folder as it was.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "entry")
	for _, data := range []string{"first", "second, longer"} {
		if err := WriteAtomic(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != data {
			t.Fatalf("read back %q, %v; want %q", got, err, data)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "folder"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(filepath.Join(dir, "folder"), []byte("x")); err == nil {
		t.Error("renaming over a folder must fail")
	}
	if err := WriteAtomic(filepath.Join(dir, "missing", "entry"), []byte("x")); err == nil {
		t.Error("a missing folder must fail")
	}
	if err := ProbeWrite(dir); err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 2 {
		t.Errorf("folder holds %v, want only entry and folder", names)
	}
}
