package unigram

import "unicode"

// Extended grapheme clusters for the Precompiled normalizer, which HF tokenizers
// applies per cluster (unicode-segmentation's graphemes(true)). The rules of
// UAX #29 are implemented except GB9c (Indic conjuncts) and GB11 (emoji ZWJ
// sequences). Both only join a character to a cluster that already holds at
// least two characters of 3 or more bytes, so the full cluster is at least 6
// bytes long, where HF falls back to per-character replacement; leaving those
// clusters split yields single characters or clusters of at least 6 bytes too,
// so the normalized text is the same. Property tables come from Go's unicode
// package (Unicode 15.0); characters newer than that may segment differently.

type gcb uint8

const (
	gcbOther gcb = iota
	gcbCR
	gcbLF
	gcbControl
	gcbExtend
	gcbZWJ
	gcbRI
	gcbPrepend
	gcbSpacingMark
	gcbL
	gcbV
	gcbT
	gcbLV
	gcbLVT
)

var spacingMarkExceptions = &unicode.RangeTable{R16: []unicode.Range16{
	{0x102B, 0x102C, 1}, {0x1038, 0x1038, 1}, {0x1062, 0x1064, 1}, {0x1067, 0x106D, 1},
	{0x1083, 0x1083, 1}, {0x1087, 0x108C, 1}, {0x108F, 0x108F, 1}, {0x109A, 0x109C, 1},
	{0x1A61, 0x1A61, 1}, {0x1A63, 0x1A64, 1}, {0xAA7B, 0xAA7B, 1}, {0xAA7D, 0xAA7D, 1},
}, R32: []unicode.Range32{{0x11720, 0x11721, 1}}}

// Indic_Syllabic_Category = Consonant_Preceding_Repha / Consonant_Prefixed.
var prependExtra = &unicode.RangeTable{R16: []unicode.Range16{{0x0D4E, 0x0D4E, 1}}, R32: []unicode.Range32{
	{0x111C2, 0x111C3, 1}, {0x1193F, 0x1193F, 1}, {0x11941, 0x11941, 1}, {0x11A3A, 0x11A3A, 1},
	{0x11A84, 0x11A89, 1}, {0x11D46, 0x11D46, 1}, {0x11F02, 0x11F02, 1},
}}

func graphemeClass(r rune) gcb {
	switch {
	case r == '\r':
		return gcbCR
	case r == '\n':
		return gcbLF
	case r == 0x200D:
		return gcbZWJ
	case r >= 0x1F1E6 && r <= 0x1F1FF:
		return gcbRI
	case r >= 0x1F3FB && r <= 0x1F3FF: // Emoji_Modifier
		return gcbExtend
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Other_Grapheme_Extend):
		return gcbExtend
	case unicode.In(r, unicode.Prepended_Concatenation_Mark, prependExtra):
		return gcbPrepend
	case unicode.In(r, unicode.Cc, unicode.Zl, unicode.Zp, unicode.Cf):
		return gcbControl
	case r == 0x0E33 || r == 0x0EB3:
		return gcbSpacingMark
	case unicode.Is(unicode.Mc, r) && !unicode.Is(spacingMarkExceptions, r):
		return gcbSpacingMark
	case (r >= 0x1100 && r <= 0x115F) || (r >= 0xA960 && r <= 0xA97C):
		return gcbL
	case (r >= 0x1160 && r <= 0x11A7) || (r >= 0xD7B0 && r <= 0xD7C6):
		return gcbV
	case (r >= 0x11A8 && r <= 0x11FF) || (r >= 0xD7CB && r <= 0xD7FB):
		return gcbT
	case r >= 0xAC00 && r <= 0xD7A3:
		if (r-0xAC00)%28 == 0 {
			return gcbLV
		}
		return gcbLVT
	}
	return gcbOther
}

// graphemeBreak reports whether a cluster boundary lies between prev and next;
// riRun is the number of regional indicators ending the current cluster.
func graphemeBreak(prev, next gcb, riRun int) bool {
	switch {
	case prev == gcbCR && next == gcbLF: // GB3
		return false
	case prev == gcbControl || prev == gcbCR || prev == gcbLF: // GB4
		return true
	case next == gcbControl || next == gcbCR || next == gcbLF: // GB5
		return true
	case prev == gcbL && (next == gcbL || next == gcbV || next == gcbLV || next == gcbLVT): // GB6
		return false
	case (prev == gcbLV || prev == gcbV) && (next == gcbV || next == gcbT): // GB7
		return false
	case (prev == gcbLVT || prev == gcbT) && next == gcbT: // GB8
		return false
	case next == gcbExtend || next == gcbZWJ || next == gcbSpacingMark: // GB9, GB9a
		return false
	case prev == gcbPrepend: // GB9b
		return false
	case prev == gcbRI && next == gcbRI: // GB12, GB13
		return riRun%2 == 0
	}
	return true // GB999
}

// forEachGrapheme calls fn with each extended grapheme cluster of s (valid UTF-8).
func forEachGrapheme(s string, fn func(string)) {
	start := 0
	var prev gcb
	riRun := 0
	for i, r := range s {
		c := graphemeClass(r)
		if i > 0 && graphemeBreak(prev, c, riRun) {
			fn(s[start:i])
			start = i
			riRun = 0
		}
		if c == gcbRI {
			riRun++
		} else {
			riRun = 0
		}
		prev = c
	}
	if start < len(s) {
		fn(s[start:])
	}
}
