package addedvocab

import (
	"fmt"
	"strings"
	"testing"
)

// split renders Split's pieces as "text"@start and id"text"@start, non-ASCII escaped.
func split(m *Matcher, s string) string {
	var out []string
	m.Split(s, func(piece string, id, start int) {
		if s[start:start+len(piece)] != piece {
			out = append(out, fmt.Sprintf("BAD OFFSET %+q@%d", piece, start))
		}
		if id < 0 {
			out = append(out, fmt.Sprintf("%+q@%d", piece, start))
		} else {
			out = append(out, fmt.Sprintf("%d%+q@%d", id, piece, start))
		}
	})
	return strings.Join(out, " ")
}

// The cases follow find_matches in HF tokenizers' added_vocabulary.rs step by step; the BPE and unigram
// packages check the same rules against ids from HF itself (their TestAddedTokenFlags).
func TestSplit(t *testing.T) {
	plain := func(id int, p string) Token { return Token{ID: id, Pattern: p} }
	for _, c := range []struct {
		name   string
		tokens []Token
		text   string
		want   string
	}{
		{"no tokens", nil, "a b", `"a b"@0`},
		{"no tokens, empty text", nil, "", ``},
		{"only empty patterns", []Token{plain(1, "")}, "ab", `"ab"@0`},
		{"leftmost-longest", []Token{plain(1, "<a"), plain(2, "<ab>"), plain(3, "b>")}, "x<ab>y<a",
			`"x"@0 2"<ab>"@1 "y"@5 1"<a"@6`},
		{"leftmost wins over longer later", []Token{plain(1, "ab"), plain(2, "bcd")}, "abcd", `1"ab"@0 "cd"@2`},
		{"same pattern: first declared", []Token{plain(1, "<s>"), plain(2, "<s>")}, "<s>", `1"<s>"@0`},
		{"adjacent tokens, no empty text", []Token{plain(1, "<s>")}, "<s><s>", `1"<s>"@0 1"<s>"@3`},
		{"lstrip and rstrip take the spaces", []Token{{ID: 7, Pattern: "<m>", LStrip: true, RStrip: true}},
			"a \t<m>  b", `"a"@0 7" \t<m>  "@1 "b"@8`},
		{"lstrip stops at the previous token", []Token{{ID: 7, Pattern: "<m>", LStrip: true, RStrip: true}},
			"<m> <m>", `7"<m> "@0 7"<m>"@4`},
		{"rstrip over multi-byte space", []Token{{ID: 7, Pattern: "<m>", RStrip: true}}, "<m>\u3000x",
			`7"<m>\u3000"@0 "x"@6`},
		{"single_word between spaces", []Token{{ID: 5, Pattern: "ab", SingleWord: true}}, "x ab y",
			`"x "@0 5"ab"@2 " y"@4`},
		{"single_word inside a word", []Token{{ID: 5, Pattern: "ab", SingleWord: true}}, "xab y", `"xab y"@0`},
		// Rust regex's \w takes marks: a combining acute before the token makes it part of a word.
		{"single_word after a combining mark", []Token{{ID: 5, Pattern: "ab", SingleWord: true}}, "e\u0301ab",
			`"e\u0301ab"@0`},
		{"single_word after an underscore", []Token{{ID: 5, Pattern: "ab", SingleWord: true}}, "_ab", `"_ab"@0`},
		{"single_word after punctuation", []Token{{ID: 5, Pattern: "ab", SingleWord: true}}, "(ab)",
			`"("@0 5"ab"@1 ")"@3`},
		// The scan resumes after the raw match even when rstrip took more: a token starting inside the
		// stripped spaces still matches, and its piece starts where it does.
		{"scan resumes after the raw match", []Token{{ID: 1, Pattern: "<a>", RStrip: true}, plain(2, " <b>")},
			"<a> <b>", `1"<a> "@0 2" <b>"@3`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := split(New(c.tokens), c.text); got != c.want {
				t.Errorf("Split(%q) = %s\nwant %s", c.text, got, c.want)
			}
		})
	}
}
