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
