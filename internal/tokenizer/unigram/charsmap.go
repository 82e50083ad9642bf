package unigram

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"
)

// charsmap is a SentencePiece precompiled normalization map (the
// `precompiled_charsmap` of a NormalizerSpec, also stored base64 in
// tokenizer.json's Precompiled normalizer): a little-endian uint32 byte size of
// a darts-clone double-array trie, the trie's uint32 units, then a blob of
// NUL-terminated replacement strings. The trie maps a UTF-8 byte sequence to the
// offset of its replacement in the blob.
type charsmap struct {
	units      []uint32
	normalized []byte
}

func parseCharsmap(b []byte) (*charsmap, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("precompiled charsmap has %d bytes; want at least the 4-byte trie size", len(b))
	}
	size := int(binary.LittleEndian.Uint32(b))
	if size%4 != 0 || size > len(b)-4 || size == 0 {
		return nil, fmt.Errorf("precompiled charsmap declares a %d-byte trie in %d bytes; the data is corrupt", size, len(b)-4)
	}
	c := &charsmap{units: make([]uint32, size/4), normalized: b[4+size:]}
	for i := range c.units {
		c.units[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return c, nil
}

// darts-clone unit layout: bits 0-7 label (bit 31 also set on leaf units so that
// they never match a label), bit 8 "has leaf", bit 9 offset-extension flag, bits
// 10-30 offset; a leaf unit holds its value in bits 0-30.
func unitLabel(u uint32) uint32  { return u & (1<<31 | 0xFF) }
func unitHasLeaf(u uint32) bool  { return (u>>8)&1 == 1 }
func unitValue(u uint32) uint32  { return u & (1<<31 - 1) }
func unitOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// prefixMatches calls fn(length, value) for every key of the trie that is a
// prefix of s, shortest first, as darts-clone's commonPrefixSearch does (a NUL
// byte ends the search, as in HF's port). fn returns false to stop.
func (c *charsmap) prefixMatches(s string, fn func(length int, value uint32) bool) {
	if len(c.units) == 0 {
		return
	}
	pos := unitOffset(c.units[0])
	for i := 0; i < len(s); i++ {
		ch := uint32(s[i])
		if ch == 0 {
			return
		}
		pos ^= ch
		if int(pos) >= len(c.units) {
			return
		}
		u := c.units[pos]
		if unitLabel(u) != ch {
			return
		}
		pos ^= unitOffset(u)
		if unitHasLeaf(u) {
			if int(pos) >= len(c.units) {
				return
			}
			if !fn(i+1, unitValue(c.units[pos])) {
				return
			}
		}
	}
}

// replacement is the NUL-terminated string at value in the blob.
func (c *charsmap) replacement(value uint32) string {
	if int(value) >= len(c.normalized) {
		return ""
	}
	rest := c.normalized[value:]
	end := 0
	for end < len(rest) && rest[end] != 0 {
		end++
	}
	return string(rest[:end])
}

// transformHF is spm_precompiled's Precompiled::transform: the replacement of
// the FIRST (shortest) trie key that prefixes chunk, standing for the whole
// chunk even when that key is shorter than the chunk.
func (c *charsmap) transformHF(chunk string) (string, bool) {
	var out string
	found := false
	c.prefixMatches(chunk, func(_ int, v uint32) bool {
		out, found = c.replacement(v), true
		return false
	})
	return out, found
}

// normalizeHF is the Precompiled normalizer of HF tokenizers: the text is cut
// into extended grapheme clusters; a cluster shorter than 6 bytes that has a
// prefix in the trie is replaced whole (transformHF); otherwise each character
// is replaced by its own entry or kept.
func (c *charsmap) normalizeHF(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	forEachGrapheme(s, func(g string) {
		if len(g) < 6 {
			if r, ok := c.transformHF(g); ok {
				b.WriteString(r)
				return
			}
		}
		for i, r := range g { // s is valid UTF-8 (Encode sanitizes it)
			part := g[i : i+utf8.RuneLen(r)]
			if rep, ok := c.transformHF(part); ok {
				b.WriteString(rep)
			} else {
				b.WriteString(part)
			}
		}
	})
	return b.String()
}

// prefixSP is SentencePiece's Normalizer::NormalizePrefix without user-defined
// symbols: the replacement of the LONGEST trie key prefixing s and its length;
// without a match, one UTF-8 character as is, or U+FFFD consuming one byte of a
// malformed sequence.
func (c *charsmap) prefixSP(s string) (string, int) {
	longest, value := 0, uint32(0)
	if c != nil {
		c.prefixMatches(s, func(n int, v uint32) bool {
			if n > longest {
				longest, value = n, v
			}
			return true
		})
	}
	if longest > 0 {
		return c.replacement(value), longest
	}
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n <= 1 {
		return "\uFFFD", 1
	}
	return s[:n], n
}
