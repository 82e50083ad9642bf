// Package safefile opens files named by model folders, caches and users without trusting
// them: only regular files are opened (a FIFO, a device or a socket is refused at once,
// never waited on), and every read is bounded by the caller's limit and the file's real size.
// Files it writes appear whole or not at all (WriteAtomic).
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNotRegular is wrapped by Open and ReadFile when the path names something other than a
// regular file (after following symbolic links).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by ReadFile and ReadAll when the data exceeds the caller's limit.
var ErrTooLarge = errors.New("larger than the limit")

// Open opens path read-only if it is a regular file. The open never blocks: it is
// non-blocking, so a FIFO without a writer opens at once and is then refused by the check
// of the opened file (which also closes the race between a check and the open).
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (it is %s)", ErrNotRegular, kind(st.Mode()))}
	}
	return f, nil
}

// kind names a file mode for an error message.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a plain file: " + m.Type().String()
}

// ReadFile reads a regular file of at most limit bytes. A larger file is refused before
// anything is read; one that grows while it is read is refused too.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: the file is %d bytes, over the %d-byte limit", ErrTooLarge, st.Size(), limit)}
	}
	data, err := ReadAll(f, limit)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return data, nil
}

// ReadAll reads r to its end, refusing more than limit bytes (a decompressor's output, say,
// which the size of its input does not bound).
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return data, nil
}

// WriteAtomic writes data to a temporary file beside path and renames it into place, so that a
// reader sees the old file or the whole new one, and a failed write leaves nothing behind.
func WriteAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// ProbeWrite proves that a file can be created in the existing folder dir by creating and
// removing one.
func ProbeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".fastvideo-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}
