// Package unigram is a SentencePiece Unigram tokenizer (the T5 / UMT5
// tokenizer of the Wan family), read from a released tokenizer/ folder.
//
// Two sources, each tokenized by the rules of the library that reads it:
//
//   - tokenizer.json (HF tokenizers, what transformers' fast tokenizer and so
//     FastVideo use): added tokens split out of the raw text; normalizers
//     (Precompiled charsmap, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip,
//     StripAccents, Prepend, Sequence); pre-tokenizers (WhitespaceSplit,
//     Metaspace, Sequence); Viterbi per word; the TemplateProcessing
//     post-processor for special tokens.
//   - spiece.model (SentencePiece's ModelProto, parsed by hand): SentencePiece's
//     normalizer (charsmap by longest match, whitespace rules, dummy prefix,
//     U+2581 escaping), user-defined symbols, Viterbi over the whole text.
//
// The Precompiled charsmap is implemented exactly: its darts-clone double-array
// trie is read and searched as SentencePiece and HF do. The one approximation is
// in HF's per-grapheme application of it: grapheme clusters follow UAX #29 with
// Go's Unicode 15.0 tables and without rules GB9c and GB11, which only matter for
// clusters of 6 bytes or more, where HF works per character anyway (grapheme.go
// argues why the output is then the same). Options.Strict rejects the
// components that are approximated (see Options). Smaller known differences:
// Lowercase uses Go's strings.ToLower (Rust's to_lowercase also turns a
// word-final Σ into ς), and NFC/NFKC use golang.org/x/text's Unicode tables.
//
// The folder's tokenizer.json is preferred, because transformers loads it when
// present; spiece.model is the fallback.
package unigram

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"fastvideo/internal/safefile"
	"fastvideo/internal/tokenizer/addedvocab"
)

// Options configure loading.
type Options struct {
	// Strict rejects tokenizer components that this package only approximates
	// instead of approximating them: an unreadable Precompiled charsmap (otherwise
	// NFKC + whitespace mapping stands in), Replace regexes beyond RE2 (otherwise
	// regexp2 runs them), Metaspace prepend_scheme "first" (otherwise judged on
	// the normalized text), and post-processors other than TemplateProcessing
	// (otherwise T5's append-</s> convention).
	Strict bool
}

// Tokenizer turns text into Unigram token ids. It is safe for concurrent use.
type Tokenizer struct {
	model *model
	kind  string // "tokenizer.json" or "spiece.model"

	// tokenizer.json pipeline
	normalizer          normalizer
	preTok              preTokenizer
	addedRaw, addedNorm *addedvocab.Matcher
	// spiece.model pipeline
	sp *spNormalizer

	addedByID      map[int]string // tokenizer.json added tokens (ids may lie beyond the model vocabulary)
	prefix, suffix []int          // special tokens around a sequence (EncodeWithSpecial)
	eosID, padID   int

	fingerprint string
}

// MaxFileBytes bounds a tokenizer.json or spiece.model: T5's are 2.4 MB and 0.8 MB.
const MaxFileBytes = 64 << 20

// Load reads a tokenizer from a folder (tokenizer.json, else spiece.model) or
// from one of those files.
func Load(path string, opts Options) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("unigram: %w", err)
	}
	if st.IsDir() {
		for _, name := range []string{"tokenizer.json", "spiece.model"} {
			p := filepath.Join(path, name)
			if _, err := os.Stat(p); err == nil {
				return Load(p, opts)
			}
		}
		return nil, fmt.Errorf("unigram: %s has neither tokenizer.json nor spiece.model; point at a released tokenizer/ folder", path)
	}
	data, err := safefile.ReadFile(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("unigram: %w", err)
	}
	var t *Tokenizer
	if strings.HasSuffix(path, ".json") {
		t, err = FromTokenizerJSON(data, opts)
	} else {
		t, err = FromSentencePiece(data, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return t, nil
}

// FromTokenizerJSON reads an HF tokenizer.json whose model is Unigram.
func FromTokenizerJSON(data []byte, opts Options) (*Tokenizer, error) {
	return fromFormat(fromHFJSON, data, opts)
}

// FromSentencePiece reads a serialized SentencePiece ModelProto (spiece.model)
// of a Unigram model.
func FromSentencePiece(data []byte, opts Options) (*Tokenizer, error) {
	return fromFormat(fromSentencePiece, data, opts)
}

// fromFormat parses data with parse (one of the file formats) and fingerprints the tokenizer.
func fromFormat(parse func([]byte, Options) (*Tokenizer, error), data []byte, opts Options) (*Tokenizer, error) {
	t, err := parse(data, opts)
	if err != nil {
		return nil, fmt.Errorf("unigram: %w", err)
	}
	t.fingerprint = fingerprint(t.kind, data, opts)
	return t, nil
}

func fingerprint(kind string, data []byte, opts Options) string {
	h := sha256.New()
	fmt.Fprintf(h, "unigram/v1 %s strict=%v\n", kind, opts.Strict)
	h.Write(data)
	return "unigram:" + hex.EncodeToString(h.Sum(nil))
}

// Encode tokenizes text without special tokens (no </s>).
func (t *Tokenizer) Encode(text string) ([]int, error) {
	if t.sp != nil {
		ids, err := t.model.encode(t.sp.normalize(text), nil)
		if err != nil {
			return nil, fmt.Errorf("unigram: %w", err)
		}
		return ids, nil
	}
	// Rust strings are valid UTF-8; a Go string may not be.
	text = strings.ToValidUTF8(text, "\uFFFD")
	var ids []int
	var err error
	// Only the piece at the start of the text counts as its first word (Metaspace's prepend_scheme
	// "first"); a piece of the normalized text is first when its raw piece was and it starts that one.
	t.addedRaw.Split(text, func(seg string, id, start int) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		if t.normalizer != nil {
			seg = t.normalizer.normalize(seg)
		}
		t.addedNorm.Split(seg, func(sub string, id, subStart int) {
			switch {
			case err != nil:
			case id >= 0:
				ids = append(ids, id)
			default:
				ids, err = t.encodeWords(sub, start == 0 && subStart == 0, ids)
			}
		})
	})
	if err != nil {
		return nil, fmt.Errorf("unigram: %w", err)
	}
	return ids, nil
}

// encodeWords appends the ids of a normalized piece of text: the pre-tokenizer's words, each segmented by
// the model on its own.
func (t *Tokenizer) encodeWords(text string, first bool, ids []int) ([]int, error) {
	words := []word{{text, first}}
	if t.preTok != nil {
		words = t.preTok.split(words)
	}
	var err error
	for _, w := range words {
		if ids, err = t.model.encode(w.text, ids); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// EncodeWithSpecial tokenizes text as transformers' tokenizer(text,
// add_special_tokens=True, truncation=True, max_length=maxLength) does for one
// sequence: the text's ids, truncated on the right so that the result with its
// special tokens (T5: a final </s>) holds at most maxLength ids. maxLength <= 0
// means no truncation. Wan passes text_len = 512.
func (t *Tokenizer) EncodeWithSpecial(text string, maxLength int) ([]int, error) {
	ids, err := t.Encode(text)
	if err != nil {
		return nil, err
	}
	special := len(t.prefix) + len(t.suffix)
	if maxLength > 0 {
		if maxLength < special {
			return nil, fmt.Errorf("unigram: max length %d cannot hold the %d special tokens of a sequence", maxLength, special)
		}
		if len(ids) > maxLength-special {
			ids = ids[:maxLength-special]
		}
	}
	out := make([]int, 0, len(ids)+special)
	out = append(out, t.prefix...)
	out = append(out, ids...)
	return append(out, t.suffix...), nil
}

// Tokens is Encode returning the pieces instead of ids (for inspection).
func (t *Tokenizer) Tokens(text string) ([]string, error) {
	ids, err := t.Encode(text)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = t.Piece(id)
	}
	return out, nil
}

// Fingerprint identifies the vocabulary and rules: equal fingerprints give equal
// ids for every text (a hash of the source file and the options).
func (t *Tokenizer) Fingerprint() string { return t.fingerprint }

// Source is "tokenizer.json" or "spiece.model": which rules the tokenizer follows.
func (t *Tokenizer) Source() string { return t.kind }

// VocabSize is the number of pieces of the model vocabulary.
func (t *Tokenizer) VocabSize() int { return len(t.model.pieces) }

// Piece returns the text of an id: an added token's content, or a vocabulary piece.
func (t *Tokenizer) Piece(id int) (string, bool) {
	if p, ok := t.addedByID[id]; ok {
		return p, true
	}
	if id < 0 || id >= len(t.model.pieces) {
		return "", false
	}
	return t.model.pieces[id], true
}

// ID returns the id of an added token or a piece (for a duplicated piece, the id
// the tokenizer produces for it).
func (t *Tokenizer) ID(piece string) (int, bool) {
	for id, p := range t.addedByID {
		if p == piece {
			return id, true
		}
	}
	id, ok := t.model.ids[piece]
	return id, ok
}

// EOSID is the id of </s> (T5: 1), or -1.
func (t *Tokenizer) EOSID() int { return t.eosID }

// PadID is the id of <pad> (T5: 0), or -1.
func (t *Tokenizer) PadID() int { return t.padID }

// UnkID is the id of the unknown token, or -1.
func (t *Tokenizer) UnkID() int { return t.model.unkID }
