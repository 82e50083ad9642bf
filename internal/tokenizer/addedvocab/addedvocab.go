// Package addedvocab splits text around a tokenizer's added tokens the way HF tokenizers'
// AddedVocabulary does (tokenizers/src/tokenizer/added_vocabulary.rs, find_matches): an Aho-Corasick
// scan with leftmost-longest semantics, each scan resuming after the raw match, then the single_word,
// lstrip and rstrip rules of each match. Both tokenizers of this module use it (the Qwen BPE in
// internal/tokenizer, the T5 unigram in internal/tokenizer/unigram): once on the raw text for the tokens
// declared normalized=false, once on each normalized piece for the others.
package addedvocab

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// Token is one added token as the scan needs it.
type Token struct {
	ID int
	// Pattern is the text matched: the token's content, normalized as the text it is matched in when
	// the token is declared normalized. An empty Pattern never matches (HF ignores empty contents).
	Pattern                    string
	SingleWord, LStrip, RStrip bool
}

// Matcher finds the added tokens in a text. Added-token sets are small (26 for Qwen3, 100-300
// <extra_id_N> for T5), so a first-byte index with longest-first candidate lists replaces the
// automaton with the same leftmost-longest result.
type Matcher struct {
	tokens  []Token
	byFirst [256][]int // indices into tokens, longest pattern first
}

// New indexes tokens; nil when none can match.
func New(tokens []Token) *Matcher {
	m := &Matcher{}
	for _, t := range tokens {
		if t.Pattern == "" {
			continue
		}
		c := t.Pattern[0]
		m.byFirst[c] = append(m.byFirst[c], len(m.tokens))
		m.tokens = append(m.tokens, t)
	}
	if len(m.tokens) == 0 {
		return nil
	}
	for c := range m.byFirst {
		l := m.byFirst[c]
		// Stable: of two tokens with one pattern, the first declared wins.
		sort.SliceStable(l, func(a, b int) bool { return len(m.tokens[l[a]].Pattern) > len(m.tokens[l[b]].Pattern) })
	}
	return m
}

// Split calls emit for the consecutive pieces of s, in order: text pieces with id -1 and matched added
// tokens with their id; start is the piece's byte offset in s. Empty text pieces are not emitted. A nil
// Matcher emits s whole.
func (m *Matcher) Split(s string, emit func(piece string, id, start int)) {
	if m == nil {
		if s != "" {
			emit(s, -1, 0)
		}
		return
	}
	startOffset := 0
	for i := 0; i < len(s); {
		tok, ok := m.longestAt(s, i)
		if !ok {
			i++
			continue
		}
		start, stop := i, i+len(tok.Pattern)
		// The scan resumes after the raw match whatever the flags decide, as iterating daachorse's
		// leftmost_find_iter does.
		i = stop
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(trailingSpaceStart(s[:start]), startOffset)
		}
		if tok.RStrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if startOffset < start {
			emit(s[startOffset:start], -1, startOffset)
		}
		emit(s[start:stop], tok.ID, start)
		startOffset = stop
	}
	if startOffset < len(s) {
		emit(s[startOffset:], -1, startOffset)
	}
}

func (m *Matcher) longestAt(s string, i int) (Token, bool) {
	for _, k := range m.byFirst[s[i]] {
		t := m.tokens[k]
		if len(s)-i >= len(t.Pattern) && s[i:i+len(t.Pattern)] == t.Pattern {
			return t, true
		}
	}
	return Token{}, false
}

// isWordChar is Rust regex's Unicode \w, which HF's single_word test uses (ENDS_WITH_WORD, STARTS_WITH_WORD
// in added_vocabulary.rs): alphabetic, marks, decimal digits, connector punctuation and join controls.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// trailingSpaceStart is where the white space that ends s begins (len(s) when s does not end with white
// space).
func trailingSpaceStart(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

func leadingSpaceLen(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
