package unigram

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fastvideo/internal/testutil/fifotest"
)

// fuzzTokenizers are the T5 pipeline read from tokenizer.json and a SentencePiece model with
// the same charsmap: the two readers and both normalizers.
func fuzzTokenizers(f *testing.F) []*Tokenizer {
	cm := buildCharsmap(f, testRules, 0)
	hf := mustHF(f, t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, cm), Options{})
	sp, err := FromSentencePiece(spSpec{pieces: spVocab, eosID: 1, padID: 0, charsmap: cm, dummyPrefix: true, removeExtra: true, escape: true}.serialize(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	return []*Tokenizer{hf, sp}
}

// FuzzUnigramEncode: Encode never fails or panics on any bytes, is deterministic, returns
// ids that name pieces, and EncodeWithSpecial truncates to its limit keeping </s>.
func FuzzUnigramEncode(f *testing.F) {
	for _, s := range []string{"", "ab", "  a   b  ", "\xff\xfe", "x</s>y<pad>", "Ａｂｃ", "e\u0301\u0301", "\u2581\u2581", "\x00\t\n", strings.Repeat("ab ", 50)} {
		f.Add(s)
	}
	toks := fuzzTokenizers(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			ids, err := tok.Encode(s)
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", tok.Source(), s, err)
			}
			for _, id := range ids {
				if _, ok := tok.Piece(id); !ok {
					t.Fatalf("%s: Encode(%q) gave id %d that names no piece", tok.Source(), s, id)
				}
			}
			again, _ := tok.Encode(s)
			if !slices.Equal(ids, again) {
				t.Fatalf("%s: Encode(%q) is not deterministic: %v then %v", tok.Source(), s, ids, again)
			}
			const limit = 8
			withEOS, err := tok.EncodeWithSpecial(s, limit)
			if err != nil || len(withEOS) > limit || withEOS[len(withEOS)-1] != tok.EOSID() {
				t.Fatalf("%s: EncodeWithSpecial(%q, %d) = %v, %v", tok.Source(), s, limit, withEOS, err)
			}
		}
	})
}

// FuzzFromTokenizerJSON: any bytes are read without a panic or a hang, and a tokenizer
// that is accepted encodes text to ids that name pieces.
func FuzzFromTokenizerJSON(f *testing.F) {
	cm := buildCharsmap(f, testRules, 0)
	good := t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, cm).json(f)
	f.Add(good)
	f.Add(t5Pipeline(hfSpec{vocab: hfVocab, unkID: nil, byteFallback: true}, nil).json(f))
	f.Add(hfSpec{vocab: hfVocab, unkID: 2}.json(f))
	f.Add(bytes.Replace(good, []byte(`"version":"1.0"`), []byte(`"version":"1.0","version":"2.0"`), 1))
	f.Add([]byte(`{"model":{"type":"Unigram","vocab":[["a",-1]],"unk_id":0}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromTokenizerJSON(data, Options{})
		if err != nil {
			return
		}
		checkEncodes(t, tok)
	})
}

// A key given twice (here "model", whose second value would silently win) is refused.
func TestDuplicateKeysAreRefused(t *testing.T) {
	good := string(t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, nil).json(t))
	for name, doc := range map[string]string{
		"model":      strings.Replace(good, `"model":{`, `"model":{"type":"Unigram","vocab":[["x",0]],"unk_id":0},"model":{`, 1),
		"model.type": strings.Replace(good, `"type":"Unigram"`, `"type":"Unigram","type":"Unigram"`, 1),
	} {
		if _, err := FromTokenizerJSON([]byte(doc), Options{}); err == nil || !strings.Contains(err.Error(), "appears twice") {
			t.Errorf("%s twice: got %v", name, err)
		}
	}
}

// A FIFO named tokenizer.json is a named error at once, not a read that waits for a writer.
func TestFIFOTokenizerJSONIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	fifotest.Make(t, p)
	err := fifotest.Within(t, 2*time.Second, func() error { _, err := Load(dir, Options{}); return err })
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("got %v, want a not-a-regular-file error naming %s", err, p)
	}
}

// A tokenizer.json above MaxFileBytes is refused before it is read.
func TestOversizedFileIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, MaxFileBytes+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p, Options{}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("got %v", err)
	}
}

// FuzzFromSentencePiece: any bytes are read as a ModelProto without a panic, and a model
// that is accepted encodes text to ids that name pieces.
func FuzzFromSentencePiece(f *testing.F) {
	cm := buildCharsmap(f, testRules, 0)
	f.Add(spSpec{pieces: spVocab, eosID: 1, padID: 0, charsmap: cm, dummyPrefix: true, removeExtra: true, escape: true}.serialize())
	f.Add(spSpec{pieces: spVocab, eosID: 1, padID: 0}.serialize())
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromSentencePiece(data, Options{})
		if err != nil {
			return
		}
		checkEncodes(t, tok)
	})
}

// checkEncodes encodes a few texts with a fuzzed tokenizer: ids must name pieces. An error is
// allowed (without unk_id, characters outside the vocabulary are one).
func checkEncodes(t *testing.T, tok *Tokenizer) {
	for _, s := range []string{"ab c", "\xff</s>", "Ａ  b"} {
		ids, err := tok.Encode(s)
		if err != nil {
			continue
		}
		for _, id := range ids {
			if _, ok := tok.Piece(id); !ok {
				t.Fatalf("Encode(%q) gave id %d that names no piece", s, id)
			}
		}
	}
}
