package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens, with the flags
// that change how it is matched.
type addedToken struct {
	ID         int
	Content    string
	Pattern    string // Content, NFC-normalized when Normalized is set
	SingleWord bool
	LStrip     bool
	RStrip     bool
	Normalized bool
	Special    bool
}

// addedMatcher finds added tokens the way HF's AddedVocabulary does: an
// Aho-Corasick scan with leftmost-longest semantics over one set of patterns
// (the non-normalized tokens on raw text, or the normalized ones on
// normalized text), then per-match single_word / lstrip / rstrip handling.
// Added-token sets are small (26 for Qwen3), so a first-byte index with
// longest-first candidate lists replaces the automaton.
type addedMatcher struct {
	tokens  []*addedToken
	byFirst [256][]int // indices into tokens, longest pattern first
}

func newAddedMatcher(tokens []*addedToken) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{tokens: tokens}
	for i, t := range tokens {
		c := t.Pattern[0]
		m.byFirst[c] = append(m.byFirst[c], i)
	}
	for c := range m.byFirst {
		l := m.byFirst[c]
		sort.SliceStable(l, func(a, b int) bool { return len(tokens[l[a]].Pattern) > len(tokens[l[b]].Pattern) })
	}
	return m
}

// split calls emit for the consecutive pieces of s: text pieces with id -1 and
// matched added tokens with their id. Empty text pieces are not emitted.
func (m *addedMatcher) split(s string, emit func(piece string, id int)) {
	if m == nil {
		if s != "" {
			emit(s, -1)
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
		// The scan resumes after the raw match whatever the flags decide,
		// exactly like iterating daachorse's leftmost_find_iter.
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
			emit(s[startOffset:start], -1)
		}
		emit(s[start:stop], tok.ID)
		startOffset = stop
	}
	if startOffset < len(s) {
		emit(s[startOffset:], -1)
	}
}

func (m *addedMatcher) longestAt(s string, i int) (*addedToken, bool) {
	for _, k := range m.byFirst[s[i]] {
		t := m.tokens[k]
		if strings.HasPrefix(s[i:], t.Pattern) {
			return t, true
		}
	}
	return nil, false
}

// isWordChar is Rust regex's Unicode \w: Alphabetic, marks, decimal digits,
// connector punctuation and join controls (HF tests single_word with it).
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

// trailingSpaceStart is where the white space that ends s begins (len(s) when
// s does not end with white space).
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
