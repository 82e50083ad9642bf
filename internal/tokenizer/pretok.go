package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// qwenSplitPattern is the Split pre-tokenizer regex of Qwen2/Qwen2.5/Qwen3
// (and Qwen3-VL) tokenizer.json. It is the only Split pattern this package
// implements, by the hand-written scanner qwenPieceEnd; any other pattern is
// rejected at load time.
const qwenSplitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Character classes of the pattern. \s is Unicode White_Space (what
// Oniguruma, HF's regex engine, uses and what unicode.IsSpace tests); the
// classes are disjoint, and "other" is [^\s\p{L}\p{N}].
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass [utf8.RuneSelf]uint8

// foldSet[c] holds the characters that match the ASCII letter c of the
// contraction group under Oniguruma's Unicode case folding: the simple-fold
// orbit, which adds U+017F LATIN SMALL LETTER LONG S to 's' (checked against
// HF tokenizers: "'ſa" splits as "'ſ", "a").
var foldSet = map[byte][]rune{}

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiClass[r] = classOfSlow(r)
	}
	for _, c := range []byte("strevmld") {
		orbit := []rune{rune(c)}
		for f := unicode.SimpleFold(rune(c)); f != rune(c); f = unicode.SimpleFold(f) {
			orbit = append(orbit, f)
		}
		foldSet[c] = orbit
	}
}

func classOfSlow(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return classOfSlow(r)
}

func foldIs(r rune, c byte) bool {
	if r < utf8.RuneSelf {
		return r == rune(c) || r == rune(c)-'a'+'A'
	}
	for _, f := range foldSet[c] {
		if r == f {
			return true
		}
	}
	return false
}

// runeAt decodes the rune at s[i:], or returns (-1, 0) at the end. The input
// is valid UTF-8 (Encode sanitizes it), so RuneError only stands for U+FFFD.
func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runEnd returns the end of the run of class cls starting at i.
func runEnd(s string, i int, cls uint8) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if classOf(r) != cls {
			break
		}
		i += n
	}
	return i
}

// qwenPieceEnd returns the end of the regex match that starts at i (< len(s)),
// reproducing a backtracking engine's leftmost-first alternation over
// qwenSplitPattern. Every character starts some alternative (letters A2,
// numbers A3, other A4, white space A7), so matches tile the string and the
// Isolated split never produces gaps.
func qwenPieceEnd(s string, i int) int {
	r0, n0 := runeAt(s, i)

	// A1: (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		r1, n1 := runeAt(s, i+1)
		if foldIs(r1, 's') || foldIs(r1, 't') || foldIs(r1, 'm') || foldIs(r1, 'd') {
			return i + 1 + n1
		}
		if n1 > 0 {
			r2, n2 := runeAt(s, i+1+n1)
			if ((foldIs(r1, 'r') || foldIs(r1, 'v')) && foldIs(r2, 'e')) || (foldIs(r1, 'l') && foldIs(r2, 'l')) {
				return i + 1 + n1 + n2
			}
		}
	}

	c0 := classOf(r0)
	// A2: [^\r\n\p{L}\p{N}]?\p{L}+ ; a letter cannot be the optional character,
	// so a leading letter takes the letters-only branch.
	if c0 == clsLetter {
		return runEnd(s, i, clsLetter)
	}
	if c0 != clsNumber && r0 != '\r' && r0 != '\n' {
		if r1, _ := runeAt(s, i+n0); r1 >= 0 && classOf(r1) == clsLetter {
			return runEnd(s, i+n0, clsLetter)
		}
	}
	// A3: \p{N}
	if c0 == clsNumber {
		return i + n0
	}
	// A4: ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r0 == ' ' {
		j = i + 1
	}
	if r, _ := runeAt(s, j); r >= 0 && classOf(r) == clsOther {
		k := runEnd(s, j, clsOther)
		for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
			k++
		}
		return k
	}
	// Only white space is left (c0 == clsSpace).
	end := runEnd(s, i, clsSpace)
	// A5: \s*[\r\n]+ : the greedy \s* backs off to the last line break of the run.
	for k := end - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	// A6: \s+(?!\S) : the whole run at the end of the text, else all but its
	// last character when that leaves at least one.
	if end == len(s) {
		return end
	}
	_, lastN := utf8.DecodeLastRuneInString(s[i:end])
	if end-lastN > i {
		return end - lastN
	}
	// A7: \s+
	return end
}

// splitQwen calls emit for every piece of s, in order.
func splitQwen(s string, emit func(piece string)) {
	for i := 0; i < len(s); {
		j := qwenPieceEnd(s, i)
		emit(s[i:j])
		i = j
	}
}
