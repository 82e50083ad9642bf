package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fastvideo/internal/safefile"
	"fastvideo/internal/testutil/fifotest"
)

func image(header string, body []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(body))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, body...)
}

func TestCorruptFiles(t *testing.T) {
	good := image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8))
	hugeLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(hugeLen, 1<<40)
	pastEnd := make([]byte, 16)
	binary.LittleEndian.PutUint64(pastEnd, 100)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated file", good[:len(good)-3], "run past the 5-byte data section"},
		{"shorter than length field", []byte{1, 2, 3}, "shorter than the 8-byte header length"},
		{"header length past the end", pastEnd, "runs past the end"},
		{"huge header length", hugeLen, "exceeds the"},
		{"overlapping ranges", image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), "overlap"},
		{"overlap hidden behind an empty tensor", image(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 16)), "overlap"},
		{"wrong byte count", image(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), "needs 12 bytes"},
		{"unknown dtype", image(`{"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), `unknown dtype "F12"`},
		{"non-JSON header", image(`not json at all`, nil), "not a JSON object"},
		{"duplicate names", image(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), "appears twice"},
		{"negative offsets", image(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, nil), "invalid data_offsets"},
		{"offsets past data", image(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 2)), "past the 2-byte data section"},
		{"three offsets", image(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, make([]byte, 2)), "must hold 2 values"},
		{"metadata not strings", image(`{"__metadata__":{"x":1}}`, nil), "__metadata__"},
		{"shape overflow", image(`{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, make([]byte, 8)), "too large"},
		// 2^62 elements of 4 bytes and [2^31, 2^31] F32 are 2^64 bytes: 0 once wrapped.
		{"byte size wraps to zero", image(`{"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}}`, nil), "[4611686018427387904] of F32 is too large"},
		{"2^31 x 2^31 wraps to zero", image(`{"a":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}}`, nil), "[2147483648 2147483648] of F32 is too large"},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ParseHeader(c.data)
			if err == nil {
				t.Fatalf("accepted a corrupt file")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if seen[err.Error()] {
				t.Fatalf("error %q is not specific to this case", err)
			}
			seen[err.Error()] = true
		})
	}
	if _, _, err := ParseHeader(good); err != nil {
		t.Fatalf("good file rejected: %v", err)
	}
}

func TestRoundTripAllDTypes(t *testing.T) {
	var in []Tensor
	for dt, size := range dtypeSizes {
		data := make([]byte, 6*size)
		for i := range data {
			data[i] = byte(i*7 + size)
		}
		in = append(in, Tensor{Name: "t." + string(dt), DType: dt, Shape: []int{2, 3}, Data: data})
	}
	in = append(in, Tensor{Name: "scalar", DType: F32, Shape: nil, Data: F32Bytes([]float32{3.5})})
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteFile(path, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" {
		t.Fatalf("metadata lost: %v", f.Metadata)
	}
	for _, want := range in {
		got, ok := f.Tensor(want.Name)
		if !ok || got.DType != want.DType || string(got.Data) != string(want.Data) || len(got.Shape) != len(want.Shape) {
			t.Fatalf("%s: round trip mismatch: %+v", want.Name, got)
		}
	}
	sc, _ := f.Tensor("scalar")
	if v, _ := sc.Float32s(); len(v) != 1 || v[0] != 3.5 {
		t.Fatalf("scalar: %v", v)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("writer left %d files, want 1", len(entries))
	}
}

func TestWriterRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []Tensor
		want string
	}{
		{"dup", []Tensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}, {Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, "given twice"},
		{"size", []Tensor{{Name: "a", DType: F32, Shape: []int{2}, Data: []byte{1}}}, "needs 8 bytes"},
		{"dtype", []Tensor{{Name: "a", DType: "Q4", Shape: []int{1}, Data: []byte{1}}}, "unknown dtype"},
	} {
		if _, err := Encode(c.in, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

func TestFixturesParse(t *testing.T) {
	for _, name := range []string{"h3_schedule", "h3_audio_vae_tiny"} {
		f, err := Open(filepath.Join("testdata", name+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(f.Metadata["refgen"], `"kind"`) || len(f.Names()) == 0 {
			t.Errorf("%s: metadata or tensors missing", name)
		}
		for _, n := range f.Names() {
			info, _ := f.Tensor(n)
			if len(info.Data) != info.NumElements()*info.DType.Size() {
				t.Errorf("%s/%s: size mismatch", name, n)
			}
		}
		f.Close()
	}
}

func TestShardedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	a := []Tensor{{Name: "x.weight", DType: F32, Shape: []int{2}, Data: F32Bytes([]float32{1, 2})}}
	b := []Tensor{{Name: "y.weight", DType: BF16, Shape: []int{1}, Data: []byte{0x80, 0x3f}}}
	if err := WriteFile(filepath.Join(dir, "m-00001-of-00002.safetensors"), a, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "m-00002-of-00002.safetensors"), b, nil); err != nil {
		t.Fatal(err)
	}
	index := `{"metadata":{"total_size":10},"weight_map":{"x.weight":"m-00001-of-00002.safetensors","y.weight":"m-00002-of-00002.safetensors"}}`
	if err := os.WriteFile(filepath.Join(dir, "m.safetensors.index.json"), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if got := strings.Join(ck.Names(), ","); got != "x.weight,y.weight" {
		t.Fatalf("names %s", got)
	}
	y, _ := ck.Tensor("y.weight")
	if v, _ := y.Float32s(); v[0] != 1 {
		t.Fatalf("bf16 1.0 decoded as %v", v)
	}

	bad := `{"weight_map":{"x.weight":"m-00002-of-00002.safetensors","z.weight":"m-00001-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, "m.safetensors.index.json"), []byte(bad), 0o644)
	if _, err := OpenCheckpoint(dir); err == nil || !strings.Contains(err.Error(), `"z.weight"`) || !strings.Contains(err.Error(), "stored in") {
		t.Fatalf("index disagreement not reported: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "m.safetensors.index.json"), []byte(`{"weight_map":{"x.weight":"../evil.safetensors"}}`), 0o644)
	if _, err := OpenCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "outside its folder") {
		t.Fatalf("escaping shard path not rejected: %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	for _, name := range []string{"h3_schedule", "h3_audio_vae_tiny"} {
		data, err := os.ReadFile(filepath.Join("testdata", name+".safetensors"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(image(`{"a":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}}`, nil))
	f.Add(image(`{"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}`, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		infos, _, err := ParseHeader(data)
		if err != nil {
			return
		}
		// Whatever was accepted must be internally consistent, by arithmetic that cannot wrap.
		for _, in := range infos {
			want := big.NewInt(int64(in.DType.Size()))
			for _, d := range in.Shape {
				want.Mul(want, big.NewInt(int64(d)))
			}
			if want.Cmp(big.NewInt(int64(len(in.Data)))) != 0 {
				t.Fatalf("accepted %s with %d bytes for shape %v of %s (%v bytes)", in.Name, len(in.Data), in.Shape, in.DType, want)
			}
			// Decoding must not panic, whatever the dtype.
			_, _ = in.Int64s()
			_, _ = in.Float32s()
		}
	})
}

// A FIFO named like a shard must be refused at once, not waited on (os.Open blocks until a
// writer appears, forever in practice).
func TestFIFOShardIsRefused(t *testing.T) {
	dir := t.TempDir()
	shard := filepath.Join(dir, "model.safetensors")
	fifotest.Make(t, shard)
	err := fifotest.Within(t, 2*time.Second, func() error { _, err := OpenCheckpoint(dir); return err })
	if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), shard) {
		t.Fatalf("got %v, want a not-a-regular-file error naming %s", err, shard)
	}
}

// Hand-built Infos are checked before decoding: a wrapped size must not reach make.
func TestDecodeChecksHandBuiltInfo(t *testing.T) {
	in := Info{Name: "w", DType: F32, Shape: []int{1 << 31, 1 << 31}}
	if _, err := in.Float32s(); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("Float32s: got %v", err)
	}
	in = Info{Name: "w", DType: I32, Shape: []int{3}, Data: make([]byte, 8)}
	if _, err := in.Int64s(); err == nil || !strings.Contains(err.Error(), "needs 12 bytes") {
		t.Fatalf("Int64s: got %v", err)
	}
}

// Checkpoints are written readable by everyone, like any download (os.CreateTemp gives 0600).
func TestWriteFileMode(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	path := filepath.Join(t.TempDir(), "out.safetensors")
	if err := WriteFile(path, []Tensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", st.Mode().Perm())
	}
}

// TestF8E4M3Float32s: F8_E4M3 tensors decode exactly (the codec itself is internal/minifloat's,
// tested over all 256 codes) and stay out of IsFloat, so that no model binds them without scales.
func TestF8E4M3Float32s(t *testing.T) {
	in := Info{Name: "w", DType: F8E4M3, Shape: []int{4}, Data: []byte{0x38, 0xb8, 0x01, 0x7e}}
	v, err := in.Float32s()
	if err != nil || v[0] != 1 || v[1] != -1 || v[2] != 1.0/512 || v[3] != 448 {
		t.Fatalf("got %v, %v", v, err)
	}
	if F8E4M3.IsFloat() {
		t.Fatal("F8_E4M3 counts as a plain float dtype")
	}
}

// TestEncodeHeader: a streamed file (EncodeHeader's prefix, then the data in its order) is byte for
// byte what Encode writes.
func TestEncodeHeader(t *testing.T) {
	tensors := []Tensor{
		{Name: "b", DType: BF16, Shape: []int{2, 3}, Data: make([]byte, 12)},
		{Name: "a", DType: F32, Shape: []int{5}, Data: []byte("0123456789abcdefghij")},
	}
	want, err := Encode(tensors, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	shapes := []Tensor{{Name: "b", DType: BF16, Shape: []int{2, 3}}, {Name: "a", DType: F32, Shape: []int{5}}}
	prefix, order, n, err := EncodeHeader(shapes, map[string]string{"format": "pt"})
	if err != nil || n != 32 || len(order) != 2 || order[0].Name != "a" {
		t.Fatalf("EncodeHeader: %d data bytes, order %v, %v", n, order, err)
	}
	got := append([]byte(nil), prefix...)
	byName := map[string][]byte{"a": tensors[1].Data, "b": tensors[0].Data}
	for _, o := range order {
		got = append(got, byName[o.Name]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the streamed file differs from Encode's")
	}
}

// FloatBytes rounds to nearest even and a value the dtype holds exactly decodes back bit-identical;
// a dtype that is no float is refused.
func TestFloatBytes(t *testing.T) {
	exact := map[DType][]float32{
		F32:  {0, -0.0, 1.5, -3.25e-7, 65504},
		BF16: {0, 1.5, -2.75, 0x1p120},
		F16:  {0, 1.5, -2.75, 65504},
		F64:  {0, 1.5, -3.25e-7},
	}
	for dt, vals := range exact {
		data, err := FloatBytes(vals, dt)
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		got, err := Info{Name: "x", DType: dt, Shape: []int{len(vals)}, Data: data}.Float32s()
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		for i := range vals {
			if math.Float32bits(got[i]) != math.Float32bits(vals[i]) {
				t.Errorf("%s: %v came back as %v", dt, vals[i], got[i])
			}
		}
	}
	// 1 + 2^-8 lies halfway between two bfloat16 values: it rounds to the even one, 1.
	if data, _ := FloatBytes([]float32{1 + 1.0/256}, BF16); data[0] != 0x80 || data[1] != 0x3f {
		t.Errorf("bf16(1+2^-8) = % x, want 80 3f (1.0)", data)
	}
	if _, err := FloatBytes([]float32{1}, I64); err == nil {
		t.Error("FloatBytes to I64: want an error")
	}
}
