package tokenizer

import (
	"strings"
	"unicode"
)

// EstimateQwenTokens approximates the Qwen3 token count of a prompt without
// the tokenizer: it counts the pieces of the byte-level BPE pre-tokenizer
// (the Qwen2 split pattern: contractions, letter runs with one optional
// leading symbol, single digits, symbol runs with an optional leading space,
// newline runs, whitespace). Common English words are one token each in
// Qwen's 151k vocabulary, so this is close for prose and a lower bound
// otherwise; plans mark it as an estimate.
func EstimateQwenTokens(prompt string) int {
	rs := []rune(prompt)
	isL := func(i int) bool { return i < len(rs) && unicode.IsLetter(rs[i]) }
	isN := func(i int) bool { return i < len(rs) && unicode.IsNumber(rs[i]) }
	isS := func(i int) bool { return i < len(rs) && unicode.IsSpace(rs[i]) }
	isNL := func(i int) bool { return i < len(rs) && (rs[i] == '\r' || rs[i] == '\n') }
	isSym := func(i int) bool { return i < len(rs) && !isL(i) && !isN(i) && !isS(i) }
	n := 0
	for i := 0; i < len(rs); n++ {
		switch {
		case rs[i] == '\'' && contraction(rs[i+1:]) > 0:
			i += 1 + contraction(rs[i+1:])
		case isL(i) || (!isNL(i) && !isN(i) && isL(i+1)): // [^\r\n\p{L}\p{N}]?\p{L}+
			i++
			for isL(i) {
				i++
			}
		case isN(i): // \p{N}
			i++
		case isSym(i) || (rs[i] == ' ' && isSym(i+1)): // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
			if rs[i] == ' ' {
				i++
			}
			for isSym(i) {
				i++
			}
			for isNL(i) {
				i++
			}
		default: // whitespace: \s*[\r\n]+, then \s+(?!\S), then \s+
			j := i
			for isS(j) {
				j++
			}
			lastNL := -1
			for k := i; k < j; k++ {
				if isNL(k) {
					lastNL = k
				}
			}
			switch {
			case lastNL >= 0:
				i = lastNL + 1
			case j < len(rs) && j-i > 1:
				i = j - 1 // leave one space to prefix the next piece
			default:
				i = j
			}
		}
	}
	return n
}

// contraction is the length of 's, 't, 're, 've, 'm, 'll or 'd (any case)
// after an apostrophe, or 0.
func contraction(rs []rune) int {
	lower := strings.ToLower(string(rs[:min(2, len(rs))]))
	for _, c := range []string{"re", "ve", "ll"} {
		if strings.HasPrefix(lower, c) {
			return 2
		}
	}
	if lower != "" && strings.ContainsRune("stmd", rune(lower[0])) {
		return 1
	}
	return 0
}
