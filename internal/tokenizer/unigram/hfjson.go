package unigram

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"

	"fastvideo/internal/strictjson"
	"fastvideo/internal/tokenizer/addedvocab"
)

// The tokenizer.json pipeline of HF tokenizers: added tokens are split out of
// the raw text first; each remaining segment is normalized, split into words by
// the pre-tokenizer, and each word is segmented by the Unigram model on its own.

type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type         string   `json:"type"`
		UnkID        *int     `json:"unk_id"`
		Vocab        [][2]any `json:"vocab"`
		ByteFallback bool     `json:"byte_fallback"`
	} `json:"model"`
}

type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type component struct {
	Type string `json:"type"`
}

// componentType reads the type of a pipeline stage (stage names it in errors); ok is false for a
// stage that is absent or null, which the callers treat as no stage.
func componentType(raw json.RawMessage, stage string) (typ string, ok bool, err error) {
	if isNull(raw) {
		return "", false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", false, fmt.Errorf("%s: %v", stage, err)
	}
	return c.Type, true, nil
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// ---- normalizers ----

type normalizer interface{ normalize(string) string }

type seqNormalizer []normalizer

func (s seqNormalizer) normalize(x string) string {
	for _, n := range s {
		x = n.normalize(x)
	}
	return x
}

type precompiledNormalizer struct{ cm *charsmap }

func (p precompiledNormalizer) normalize(s string) string { return p.cm.normalizeHF(s) }

// nfkcWhitespaceNormalizer stands in for a Precompiled charsmap that cannot be
// read (non-strict mode only): NFKC, every whitespace character to a space, other
// control and format characters removed — the gist of SentencePiece's nmt_nfkc
// rules, not their exact table.
type nfkcWhitespaceNormalizer struct{}

func (nfkcWhitespaceNormalizer) normalize(s string) string {
	s = norm.NFKC.String(s)
	return strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case unicode.In(r, unicode.Cc, unicode.Cf):
			return -1
		}
		return r
	}, s)
}

type formNormalizer struct{ form norm.Form }

func (f formNormalizer) normalize(s string) string { return f.form.String(s) }

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string { return strings.ToLower(s) }

type stripNormalizer struct{ left, right bool }

func (st stripNormalizer) normalize(s string) string {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type prependNormalizer struct{ prefix string }

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

type stripAccentsNormalizer struct{}

func (stripAccentsNormalizer) normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s)
}

type replaceNormalizer struct {
	literal string // String pattern
	re      *regexp.Regexp
	re2     *regexp2.Regexp
	content string
}

func (r replaceNormalizer) normalize(s string) string {
	switch {
	case r.re != nil:
		return r.re.ReplaceAllLiteralString(s, r.content)
	case r.re2 != nil:
		out, err := r.re2.ReplaceFunc(s, func(regexp2.Match) string { return r.content }, -1, -1)
		if err != nil {
			return s // regexp2 fails only on a match timeout, which is not set
		}
		return out
	case r.literal != "":
		return strings.ReplaceAll(s, r.literal, r.content)
	}
	return s
}

func parseNormalizer(raw json.RawMessage, opts Options) (normalizer, error) {
	typ, ok, err := componentType(raw, "normalizer")
	if !ok || err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		return parseSequenceNormalizer(raw, opts)
	case "Precompiled":
		return parsePrecompiledNormalizer(raw, opts)
	case "Replace":
		return parseReplaceNormalizer(raw, opts)
	case "NFC":
		return formNormalizer{norm.NFC}, nil
	case "NFD":
		return formNormalizer{norm.NFD}, nil
	case "NFKC":
		return formNormalizer{norm.NFKC}, nil
	case "NFKD":
		return formNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "StripAccents":
		return stripAccentsNormalizer{}, nil
	case "Strip":
		var s struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("normalizer Strip: %v", err)
		}
		return stripNormalizer{s.Left, s.Right}, nil
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %v", err)
		}
		return prependNormalizer{p.Prepend}, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported (supported: Sequence, Precompiled, Replace, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend)", typ)
}

func parseSequenceNormalizer(raw json.RawMessage, opts Options) (normalizer, error) {
	seq, err := parseSequence(raw, "normalizer", "normalizers", opts, parseNormalizer)
	if err != nil {
		return nil, err
	}
	return seqNormalizer(seq), nil
}

// parseSequence parses a Sequence normalizer or pre-tokenizer: the parts listed under key, each with
// parse, leaving out those that parse to nil (they do nothing).
func parseSequence[T any](raw json.RawMessage, stage, key string, opts Options, parse func(json.RawMessage, Options) (T, error)) ([]T, error) {
	var fields map[string]json.RawMessage
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("%s Sequence: %v", stage, err)
	}
	if list, ok := fields[key]; ok {
		if err := json.Unmarshal(list, &parts); err != nil {
			return nil, fmt.Errorf("%s Sequence: %s: %v", stage, key, err)
		}
	}
	var seq []T
	for _, r := range parts {
		p, err := parse(r, opts)
		if err != nil {
			return nil, err
		}
		if any(p) != nil {
			seq = append(seq, p)
		}
	}
	return seq, nil
}

func parsePrecompiledNormalizer(raw json.RawMessage, opts Options) (normalizer, error) {
	var p struct {
		Charsmap *string `json:"precompiled_charsmap"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("normalizer Precompiled: %v", err)
	}
	if p.Charsmap == nil || *p.Charsmap == "" {
		return nil, nil // an empty map normalizes nothing
	}
	data, err := base64.StdEncoding.DecodeString(*p.Charsmap)
	if err == nil {
		var cm *charsmap
		if cm, err = parseCharsmap(data); err == nil {
			return precompiledNormalizer{cm}, nil
		}
	}
	if opts.Strict {
		return nil, fmt.Errorf("normalizer Precompiled: precompiled_charsmap cannot be read (%v); without Options.Strict it is replaced by NFKC + whitespace mapping", err)
	}
	return nfkcWhitespaceNormalizer{}, nil
}

func parseReplaceNormalizer(raw json.RawMessage, opts Options) (normalizer, error) {
	var r struct {
		Pattern struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("normalizer Replace: %v", err)
	}
	switch {
	case r.Pattern.String != nil:
		return replaceNormalizer{literal: *r.Pattern.String, content: r.Content}, nil
	case r.Pattern.Regex != nil:
		if re, err := regexp.Compile(*r.Pattern.Regex); err == nil {
			return replaceNormalizer{re: re, content: r.Content}, nil
		}
		// Oniguruma syntax beyond RE2 (look-arounds, ...).
		if opts.Strict {
			return nil, fmt.Errorf("normalizer Replace: regex %q needs a backtracking engine (regexp2 approximates Oniguruma); rejected under Options.Strict", *r.Pattern.Regex)
		}
		re2, err := regexp2.Compile(*r.Pattern.Regex, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: regex %q: %v", *r.Pattern.Regex, err)
		}
		return replaceNormalizer{re2: re2, content: r.Content}, nil
	}
	return nil, fmt.Errorf("normalizer Replace: pattern has neither String nor Regex")
}

// ---- pre-tokenizers ----

// word is one pre-token; first marks a word that begins at offset 0 of the
// original text (Metaspace's prepend_scheme "first").
type word struct {
	text  string
	first bool
}

type preTokenizer interface{ split([]word) []word }

type seqPreTokenizer []preTokenizer

func (s seqPreTokenizer) split(ws []word) []word {
	for _, p := range s {
		ws = p.split(ws)
	}
	return ws
}

type whitespaceSplit struct{}

func (whitespaceSplit) split(ws []word) []word {
	var out []word
	for _, w := range ws {
		start := -1
		for i, r := range w.text {
			if unicode.IsSpace(r) {
				if start >= 0 {
					out = append(out, word{w.text[start:i], w.first && start == 0})
					start = -1
				}
			} else if start < 0 {
				start = i
			}
		}
		if start >= 0 {
			out = append(out, word{w.text[start:], w.first && start == 0})
		}
	}
	return out
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

type metaspace struct {
	repl       string
	scheme     prependScheme
	splitWords bool
}

func (m metaspace) split(ws []word) []word {
	var out []word
	for _, w := range ws {
		t := strings.ReplaceAll(w.text, " ", m.repl)
		if !strings.HasPrefix(t, m.repl) && (m.scheme == prependAlways || (m.scheme == prependFirst && w.first)) {
			t = m.repl + t
		}
		if !m.splitWords {
			if t != "" {
				out = append(out, word{t, w.first})
			}
			continue
		}
		// Split before every replacement character (MergedWithNext).
		start := 0
		for i := 0; i < len(t); {
			j := strings.Index(t[i:], m.repl)
			if j < 0 {
				break
			}
			at := i + j
			if at > start {
				out = append(out, word{t[start:at], w.first && start == 0})
				start = at
			}
			i = at + len(m.repl)
		}
		if start < len(t) {
			out = append(out, word{t[start:], w.first && start == 0})
		}
	}
	return out
}

func parsePreTokenizer(raw json.RawMessage, opts Options) (preTokenizer, error) {
	typ, ok, err := componentType(raw, "pre_tokenizer")
	if !ok || err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := parseSequence(raw, "pre_tokenizer", "pretokenizers", opts, parsePreTokenizer)
		if err != nil {
			return nil, err
		}
		return seqPreTokenizer(seq), nil
	case "WhitespaceSplit":
		return whitespaceSplit{}, nil
	case "Metaspace":
		var m struct {
			Replacement    string  `json:"replacement"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
			PrependScheme  *string `json:"prepend_scheme"`
			Split          *bool   `json:"split"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %v", err)
		}
		if utf8.RuneCountInString(m.Replacement) != 1 {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: replacement %q must be one character", m.Replacement)
		}
		ms := metaspace{repl: m.Replacement, scheme: prependAlways, splitWords: m.Split == nil || *m.Split}
		if m.PrependScheme != nil {
			switch *m.PrependScheme {
			case "always":
			case "first":
				if opts.Strict {
					return nil, fmt.Errorf("pre_tokenizer Metaspace: prepend_scheme \"first\" is approximated here (a word counts as first when it starts the text, ignoring offset changes made by normalizers); rejected under Options.Strict")
				}
				ms.scheme = prependFirst
			case "never":
				ms.scheme = prependNever
			default:
				return nil, fmt.Errorf("pre_tokenizer Metaspace: prepend_scheme %q is not always, first or never", *m.PrependScheme)
			}
		}
		if m.AddPrefixSpace != nil && !*m.AddPrefixSpace {
			if ms.scheme != prependNever && m.PrependScheme != nil {
				return nil, fmt.Errorf("pre_tokenizer Metaspace: add_prefix_space false contradicts prepend_scheme %q", *m.PrependScheme)
			}
			ms.scheme = prependNever
		}
		return ms, nil
	}
	return nil, fmt.Errorf("pre_tokenizer type %q is not supported (supported: Sequence, WhitespaceSplit, Metaspace)", typ)
}

// ---- post-processor ----

// parseTemplate returns the special-token ids a TemplateProcessing "single"
// template puts before and after the sequence. ok is false when there is no
// post-processor.
func parseTemplate(raw json.RawMessage, opts Options) (prefix, suffix []int, ok bool, err error) {
	typ, ok, err := componentType(raw, "post_processor")
	if !ok || err != nil {
		return nil, nil, false, err
	}
	if typ != "TemplateProcessing" {
		if opts.Strict {
			return nil, nil, false, fmt.Errorf("post_processor type %q is not supported (only TemplateProcessing); without Options.Strict the T5 convention (append </s>) is used", typ)
		}
		return nil, nil, false, nil
	}
	var tp struct {
		Single []struct {
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &tp); err != nil {
		return nil, nil, false, fmt.Errorf("post_processor TemplateProcessing: %v", err)
	}
	seen := false
	for _, piece := range tp.Single {
		switch {
		case piece.Sequence != nil:
			if seen {
				return nil, nil, false, fmt.Errorf("post_processor TemplateProcessing: the single template holds the sequence twice")
			}
			seen = true
		case piece.SpecialToken != nil:
			st, found := tp.SpecialTokens[piece.SpecialToken.ID]
			if !found || len(st.IDs) == 0 {
				return nil, nil, false, fmt.Errorf("post_processor TemplateProcessing: special token %q has no ids in special_tokens", piece.SpecialToken.ID)
			}
			if seen {
				suffix = append(suffix, st.IDs...)
			} else {
				prefix = append(prefix, st.IDs...)
			}
		}
	}
	if !seen {
		return nil, nil, false, fmt.Errorf("post_processor TemplateProcessing: the single template has no $A sequence")
	}
	return prefix, suffix, true, nil
}

// ---- loading ----

func fromHFJSON(data []byte, opts Options) (*Tokenizer, error) {
	// encoding/json keeps the last of two equal keys; a file saying two things is refused.
	if err := strictjson.CheckUniqueKeys(data); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %v", err)
	}
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json is not valid JSON: %v", err)
	}
	if f.Model.Type != "Unigram" {
		return nil, fmt.Errorf("tokenizer.json model type is %q; this package reads Unigram (SentencePiece) tokenizers only", f.Model.Type)
	}
	m := &model{unkID: -1, byteFallback: f.Model.ByteFallback}
	if f.Model.UnkID != nil {
		m.unkID = *f.Model.UnkID
	}
	for i, e := range f.Model.Vocab {
		p, ok1 := e[0].(string)
		sc, ok2 := e[1].(float64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("tokenizer.json model.vocab[%d] = %v is not a [piece, score] pair", i, e)
		}
		m.pieces = append(m.pieces, p)
		m.scores = append(m.scores, sc)
	}
	if err := m.finish(); err != nil {
		return nil, fmt.Errorf("tokenizer.json model: %v", err)
	}
	t := &Tokenizer{model: m, kind: "tokenizer.json"}
	var err error
	if t.normalizer, err = parseNormalizer(f.Normalizer, opts); err != nil {
		return nil, err
	}
	if t.preTok, err = parsePreTokenizer(f.PreTokenizer, opts); err != nil {
		return nil, err
	}
	var raw, normed []addedvocab.Token
	t.addedByID = map[int]string{}
	for _, a := range f.AddedTokens {
		t.addedByID[a.ID] = a.Content
		tok := addedvocab.Token{ID: a.ID, Pattern: a.Content, SingleWord: a.SingleWord, LStrip: a.LStrip, RStrip: a.RStrip}
		if a.Normalized {
			if t.normalizer != nil && a.Content != "" {
				tok.Pattern = t.normalizer.normalize(a.Content)
			}
			normed = append(normed, tok)
		} else {
			raw = append(raw, tok)
		}
	}
	t.addedRaw, t.addedNorm = addedvocab.New(raw), addedvocab.New(normed)
	prefix, suffix, ok, err := parseTemplate(f.PostProcessor, opts)
	if err != nil {
		return nil, err
	}
	t.eosID = t.lookup(f.AddedTokens, "</s>")
	t.padID = t.lookup(f.AddedTokens, "<pad>")
	if ok {
		t.prefix, t.suffix = prefix, suffix
	} else if t.eosID >= 0 {
		t.suffix = []int{t.eosID} // T5's convention when tokenizer.json carries no template
	}
	return t, nil
}

// lookup finds a special token's id among the added tokens, then in the vocabulary.
func (t *Tokenizer) lookup(added []hfAddedToken, content string) int {
	for _, a := range added {
		if a.Content == content {
			return a.ID
		}
	}
	if id, ok := t.model.ids[content]; ok {
		return id
	}
	return -1
}
