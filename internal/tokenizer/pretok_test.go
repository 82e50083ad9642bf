package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
)

// The reference for the hand-written scanner: the pattern itself, run by a
// backtracking engine with look-ahead. regexp2 agrees with Oniguruma (HF's
// engine) on every class the pattern uses, including \s as Unicode White_Space
// and (?i) folding U+017F to 's'.
var qwenRegexp2 = regexp2.MustCompile(qwenSplitPattern, regexp2.None)

func splitRef(t testing.TB, s string) []string {
	idx, err := qwenRegexp2.FindAllStringIndex(s, -1)
	if err != nil {
		t.Fatal(err)
	}
	// Isolated: matches and the gaps between them are pieces.
	var out []string
	prev := 0
	for _, m := range idx {
		if m[0] > prev {
			out = append(out, s[prev:m[0]])
		}
		out = append(out, s[m[0]:m[1]])
		prev = m[1]
	}
	if prev < len(s) {
		out = append(out, s[prev:])
	}
	return out
}

func splitGot(s string) []string {
	var out []string
	splitQwen(s, func(p string) { out = append(out, p) })
	return out
}

// splitAlphabet mixes every class and boundary the pattern distinguishes:
// contraction letters in both cases and the long s, apostrophes, \r and \n,
// ASCII and Unicode white space (and look-alikes that are not \s), letters,
// marks, numbers of all three categories, punctuation, symbols and emoji.
var splitAlphabet = []string{
	"'", "'", "'", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D", "\u017f", "k", "\u212a",
	" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\v", "\f", "\u1680", "\u202f",
	"\u001c", "\u200b", "\ufeff", "\u180e",
	"a", "Z", "\u00e9", "\u4e2d", "\u6587", "\u0939", "\u093f", "\u094d", "\u0301", "\u0338", "\u05d0", "\u0627", "\uac00",
	"0", "7", "\u0661", "\u00bd", "\u216b", "\u00b2", "\U0001D7CE",
	",", ".", "!", "?", "-", "_", "(", ")", "<", ">", "|", "/", "\\", "\"", "$", "\u20ac", "\u3002", "\uff0c",
	"\U0001F600", "\U0001F3AC", "\u200d", "\ufffd", "\x00",
}

func randomText(r *rand.Rand, maxRunes int) string {
	var b strings.Builder
	n := 1 + r.IntN(maxRunes)
	for i := 0; i < n; i++ {
		b.WriteString(splitAlphabet[r.IntN(len(splitAlphabet))])
	}
	return b.String()
}

var splitEdgeCases = []string{
	"", " ", "  ", "   x", "x   ", "x \n", "x \n ", " \n\n ", "\r\n\r\n  a", "a\t\tb", "a \t b", "'s", "'S", "'\u017f", "'ll", "'LL", "'lL",
	"'re", "'rE", "'ve", "'x", "''s", "'", "x'", "it's", "don't", "'sa", "'\u017fa", "\u00a0\u00a0a", "\u3000a", "\u2028\u2028\u2028",
	"!!\n\n", " !!\n", "  !!", "1234", "a1", "\u0661\u0662", "hello world", "(S1) A presenter says <d>[English] Fast H3 is amazing.</d>",
}

func TestSplitMatchesRegexp2(t *testing.T) {
	check := func(s string) bool {
		got, want := splitGot(s), splitRef(t, s)
		if !slices.Equal(got, want) {
			t.Errorf("split(%q):\n got  %q\n want %q", s, got, want)
			return false
		}
		return true
	}
	for _, s := range splitEdgeCases {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	failed := 0
	for i := 0; i < n && failed < 10; i++ {
		if !check(randomText(r, 24)) {
			failed++
		}
	}
	if failed == 0 {
		t.Logf("scanner == regexp2 on %d edge cases and %d random strings", len(splitEdgeCases), n)
	}
}

// FuzzSplitQwen compares the scanner with regexp2 on arbitrary valid UTF-8.
func FuzzSplitQwen(f *testing.F) {
	for _, s := range splitEdgeCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = toValidUTF8(s)
		if got, want := splitGot(s), splitRef(t, s); !slices.Equal(got, want) {
			t.Fatalf("split(%q):\n got  %q\n want %q", s, got, want)
		}
	})
}

func BenchmarkSplitQwen(b *testing.B) {
	s := strings.Repeat("A woman in a coral jacket dances a two-step, it's 2026!\n", 20)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		splitQwen(s, func(string) {})
	}
}
