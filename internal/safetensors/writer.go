package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Tensor is one entry to write.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Encode builds a safetensors image. Tensors are laid out in name order so that
// the same input always gives the same bytes.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	prefix, sorted, dataBytes, err := header(tensors, metadata, true)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, int64(len(prefix))+dataBytes)
	out = append(out, prefix...)
	for _, t := range sorted {
		out = append(out, t.Data...)
	}
	return out, nil
}

// FromTensors is the in-memory file of tensors, laid out as Encode writes them: a source built in
// memory then reads through the same parser, with the same checks, as a file read from disk.
func FromTensors(tensors []Tensor, metadata map[string]string) (*File, error) {
	img, err := Encode(tensors, metadata)
	if err != nil {
		return nil, err
	}
	return FromBytes(img)
}

// EncodeHeader is what precedes the data of a file holding tensors, for writers that stream the
// data rather than hold it: the header (its length, then the JSON padded to 8 bytes), the tensors
// in the order their data must follow it, and the data's total size. Each size comes from the
// tensor's dtype and shape; Data is ignored.
func EncodeHeader(tensors []Tensor, metadata map[string]string) (prefix []byte, order []Tensor, dataBytes int64, err error) {
	return header(tensors, metadata, false)
}

// header builds the file prefix of Encode and EncodeHeader; withData checks that each tensor's
// Data has the size its dtype and shape say.
func header(tensors []Tensor, metadata map[string]string, withData bool) ([]byte, []Tensor, int64, error) {
	sorted := append([]Tensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var offset int64
	for i, t := range sorted {
		if i > 0 && sorted[i-1].Name == t.Name {
			return nil, nil, 0, fmt.Errorf("safetensors: tensor %q given twice", t.Name)
		}
		if t.Name == "__metadata__" {
			return nil, nil, 0, fmt.Errorf("safetensors: %q is reserved", t.Name)
		}
		size := t.DType.Size()
		if size == 0 {
			return nil, nil, 0, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		want, ok := ByteSize(t.DType, t.Shape)
		if !ok {
			return nil, nil, 0, fmt.Errorf("safetensors: tensor %q: shape %v of %s is too large or has a negative dimension", t.Name, t.Shape, t.DType)
		}
		if withData && want != int64(len(t.Data)) {
			return nil, nil, 0, fmt.Errorf("safetensors: tensor %q: shape %v of %s needs %d bytes, got %d", t.Name, t.Shape, t.DType, want, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": shape, "data_offsets": []int64{offset, offset + want}}
		offset += want
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("safetensors: %w", err)
	}
	// Pad the header with spaces to 8 bytes so the data section stays aligned for
	// readers that map tensors in place.
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	prefix := make([]byte, 8, 8+len(hj))
	binary.LittleEndian.PutUint64(prefix, uint64(len(hj)))
	return append(prefix, hj...), sorted, offset, nil
}

// WriteFile writes tensors to path atomically: a temp file in the same folder,
// synced, then renamed, so a failed write never leaves a partial checkpoint.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	data, err := Encode(tensors, metadata)
	if err != nil {
		return err
	}
	return WriteAtomic(path, data)
}

// OutputMode is the permission of files written by WriteAtomic: checkpoints and outputs are
// shared like any download (os.CreateTemp alone would leave them private, 0600).
const OutputMode = 0o644

// WriteAtomic writes data to path through a temp file and a rename; the file gets OutputMode.
func WriteAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	name := tmp.Name()
	merr := tmp.Chmod(OutputMode)
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if merr != nil || werr != nil || serr != nil || cerr != nil {
		os.Remove(name)
		return fmt.Errorf("safetensors: writing %s: %v", path, firstErr(merr, werr, serr, cerr))
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
