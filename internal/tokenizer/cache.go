package tokenizer

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"

	"fastvideo/internal/safefile"
	"fastvideo/internal/safetensors"
)

// The cache file holds a compiled tokenizer so that a warm Load skips the
// gunzip, the JSON parse of 151k vocabulary entries and 151k merges, and the
// validation. Layout (little endian): magic, sha256 of the source file,
// the payload written by encodeCompiled, and a CRC-32C of everything before it.
// A file that fails any check is treated as absent and rewritten.
const cacheMagic = "FVTOKC\x00\x02" // bump the last byte when the payload or its meaning changes

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func cachePath(dir string, key [32]byte) string {
	return filepath.Join(dir, hex.EncodeToString(key[:])+".tokc")
}

func defaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "fastvideo", "tokenizer"), nil
}

func encodeCompiled(key [32]byte, c *compiled) []byte {
	b := make([]byte, 0, 64+len(c.DecData)+4*len(c.DecOff)+4*len(c.Merges)+c.NumIDs/8)
	b = append(b, cacheMagic...)
	b = append(b, key[:]...)
	b = append(b, c.Fingerprint[:]...)
	var flags byte
	if c.NFC {
		flags |= 1
	}
	if c.IgnoreMerges {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(c.NumIDs))
	known := make([]byte, (c.NumIDs+7)/8)
	for i, k := range c.Known {
		if k {
			known[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, known...)
	for _, o := range c.DecOff {
		b = binary.LittleEndian.AppendUint32(b, o)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.DecData)))
	b = append(b, c.DecData...)
	for _, id := range c.ByteID {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	b = appendU32s(b, c.Merges)
	b = appendU32s(b, c.WholeWord)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Added)))
	for _, t := range c.Added {
		b = binary.LittleEndian.AppendUint32(b, uint32(t.ID))
		var f byte
		for i, v := range []bool{t.SingleWord, t.LStrip, t.RStrip, t.Normalized, t.Special} {
			if v {
				f |= 1 << i
			}
		}
		b = append(b, f)
		b = appendString(b, t.Content)
		b = appendString(b, t.Pattern)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendU32s(b []byte, v []int32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

var errBadCache = errors.New("tokenizer cache: corrupt or stale")

// cacheReader consumes a byte slice, latching errBadCache on the first
// out-of-bounds read so that decodeCompiled can check once at the end.
type cacheReader struct {
	b   []byte
	err error
}

func (r *cacheReader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errBadCache
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *cacheReader) u32() uint32 {
	v := r.take(4)
	if v == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(v)
}

func (r *cacheReader) i32s(maxLen int) []int32 {
	n := int(r.u32())
	if n > maxLen || n > len(r.b)/4 {
		r.err = errBadCache
		return nil
	}
	raw := r.take(4 * n)
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func (r *cacheReader) str() string {
	return string(r.take(int(r.u32())))
}

// decodeCompiled parses a cache file, checking magic, key, checksum and every
// length and id, so that no corrupt file can make Encode or Decode misbehave.
func decodeCompiled(data []byte, key [32]byte) (*compiled, error) {
	r, err := openCache(data, key)
	if err != nil {
		return nil, err
	}
	c := &compiled{}
	copy(c.Fingerprint[:], r.take(32))
	flags := r.take(1)
	if r.err != nil {
		return nil, r.err
	}
	c.NFC, c.IgnoreMerges = flags[0]&1 != 0, flags[0]&2 != 0
	for _, read := range []func(*cacheReader) error{c.readDecodeTable, c.readIDTables, c.readAdded} {
		if err := read(r); err != nil {
			return nil, err
		}
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, errBadCache
	}
	return c, nil
}

// openCache checks the magic, the checksum and the key, and returns a reader
// positioned after the key.
func openCache(data []byte, key [32]byte) (*cacheReader, error) {
	if len(data) < len(cacheMagic)+32+4 || string(data[:len(cacheMagic)]) != cacheMagic {
		return nil, errBadCache
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errBadCache
	}
	r := &cacheReader{b: body[len(cacheMagic):]}
	if string(r.take(32)) != string(key[:]) {
		return nil, errBadCache
	}
	return r, nil
}

// readDecodeTable reads the id count, the known-id bitmap and the decode
// offsets and bytes, checking that the offsets ascend within the data.
func (c *compiled) readDecodeTable(r *cacheReader) error {
	c.NumIDs = int(r.u32())
	if c.NumIDs <= 0 || c.NumIDs > len(r.b) {
		return errBadCache
	}
	known := r.take((c.NumIDs + 7) / 8)
	if r.err != nil {
		return r.err
	}
	c.Known = make([]bool, c.NumIDs)
	for i := range c.Known {
		c.Known[i] = known[i/8]&(1<<(i%8)) != 0
	}
	offRaw := r.take(4 * (c.NumIDs + 1))
	dataLen := int(r.u32())
	c.DecData = append([]byte(nil), r.take(dataLen)...)
	if r.err != nil {
		return r.err
	}
	c.DecOff = make([]uint32, c.NumIDs+1)
	for i := range c.DecOff {
		c.DecOff[i] = binary.LittleEndian.Uint32(offRaw[4*i:])
		if int(c.DecOff[i]) > dataLen || (i > 0 && c.DecOff[i] < c.DecOff[i-1]) {
			return errBadCache
		}
	}
	return nil
}

// validID reports whether id names a known token.
func (c *compiled) validID(id int32) bool { return id >= 0 && int(id) < c.NumIDs && c.Known[id] }

// readIDTables reads the byte ids, the merge triples and the whole-word ids,
// each a known id.
func (c *compiled) readIDTables(r *cacheReader) error {
	for i := range c.ByteID {
		c.ByteID[i] = int32(r.u32())
		if !c.validID(c.ByteID[i]) {
			return errBadCache
		}
	}
	c.Merges = r.i32s(len(r.b) / 4)
	c.WholeWord = r.i32s(len(r.b) / 4)
	if r.err != nil || len(c.Merges)%3 != 0 {
		return errBadCache
	}
	for _, ids := range [][]int32{c.Merges, c.WholeWord} {
		for _, id := range ids {
			if !c.validID(id) {
				return errBadCache
			}
		}
	}
	return nil
}

// readAdded reads the added tokens.
func (c *compiled) readAdded(r *cacheReader) error {
	nAdded := int(r.u32())
	if nAdded > len(r.b) {
		return errBadCache
	}
	for i := 0; i < nAdded && r.err == nil; i++ {
		var t addedToken
		id := int32(r.u32())
		f := r.take(1)
		t.Content, t.Pattern = r.str(), r.str()
		if r.err != nil || !c.validID(id) || t.Pattern == "" {
			return errBadCache
		}
		t.ID = int(id)
		t.SingleWord, t.LStrip, t.RStrip, t.Normalized, t.Special = f[0]&1 != 0, f[0]&2 != 0, f[0]&4 != 0, f[0]&8 != 0, f[0]&16 != 0
		c.Added = append(c.Added, t)
	}
	return nil
}

// maxCacheBytes bounds a cache file read: it holds less than the tokenizer.json it was
// compiled from (3.4 MB for Qwen3's 11 MB).
const maxCacheBytes = 2 * MaxJSONBytes

// readCache loads the compiled tokenizer stored for key. A missing, corrupt or non-regular
// file is an error (errors.Is(err, safefile.ErrNotRegular) tells the last apart).
func readCache(dir string, key [32]byte) (*compiled, error) {
	data, err := safefile.ReadFile(cachePath(dir, key), maxCacheBytes)
	if err != nil {
		return nil, err
	}
	return decodeCompiled(data, key)
}

// writeCache stores the compiled tokenizer with safetensors.WriteAtomic's temp file and rename,
// so that concurrent loaders never see a partial file. Failures are returned for tests but
// otherwise ignored: the cache only saves time.
func writeCache(dir string, key [32]byte, c *compiled) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return safetensors.WriteAtomic(cachePath(dir, key), encodeCompiled(key, c))
}
