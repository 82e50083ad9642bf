package tokenizer

import (
	"unicode/utf8"
)

// byteToRune is GPT-2's byte<->unicode table: printable Latin-1 bytes map to
// themselves and the other 68 bytes to U+0100.. in byte order, so that every
// byte has a visible, non-space character and BPE vocabularies can be stored as
// JSON strings.
var byteToRune [256]rune

// runeToByte inverts byteToRune.
var runeToByte map[rune]byte

func init() {
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	runeToByte = make(map[rune]byte, 256)
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode turns a token string into the bytes HF's ByteLevel decoder
// emits for it: the table's inverse when every character is in the table
// (printable ASCII maps to itself, so "<|im_end|>" decodes to itself), and
// otherwise the token's own UTF-8 bytes (an added token holding a space, say).
func byteLevelDecode(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}

// appendLossyUTF8 appends b to dst with every ill-formed sequence replaced by
// one U+FFFD per maximal subpart, the policy of Rust's String::from_utf8_lossy
// (and of Python's errors="replace"), so that Decode matches HF on partial
// multi-byte tokens.
func appendLossyUTF8(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			dst = append(dst, b[i:i+size]...)
			i += size
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return dst
}

// maximalSubpart returns the length (>= 1) of the longest prefix of b that
// starts a well-formed UTF-8 sequence, given that b does not start with one.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}

// toValidUTF8 replaces ill-formed sequences the way appendLossyUTF8 does,
// returning s itself when it is already valid.
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendLossyUTF8(make([]byte, 0, len(s)+8), []byte(s)))
}
