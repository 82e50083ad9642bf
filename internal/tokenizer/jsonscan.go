package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"fastvideo/internal/strictjson"
)

// A Qwen tokenizer.json is 11 MB, nearly all of it model.vocab (151k
// string->int entries) and model.merges (151k pairs); encoding/json spends
// most of a cold load on reflection there. jsonScan walks the document itself,
// decodes those two fields directly, and hands every other value, as raw
// bytes, to encoding/json. Keys are matched exactly (case-sensitive, like HF's
// serde); a key repeated in one object is an error at any depth, where both
// would keep one value silently (serde the first or the last depending on the
// field's type, encoding/json the last).
type jsonScan struct {
	b   []byte
	pos int
}

func (s *jsonScan) errorf(format string, args ...any) error {
	return fmt.Errorf("JSON at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScan) ws() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end) without consuming it.
func (s *jsonScan) peek() byte {
	s.ws()
	if s.pos >= len(s.b) {
		return 0
	}
	return s.b[s.pos]
}

func (s *jsonScan) expect(c byte) error {
	if s.peek() != c {
		return s.errorf("expected %q", c)
	}
	s.pos++
	return nil
}

// str decodes a JSON string. Strings without escapes are sliced directly
// (after a UTF-8 check); the others go to encoding/json so that escapes and
// invalid bytes are handled exactly as it does.
func (s *jsonScan) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	escaped, high := false, false
	for {
		if s.pos >= len(s.b) {
			return "", s.errorf("unterminated string")
		}
		c := s.b[s.pos]
		if c == '"' {
			break
		}
		switch {
		case c == '\\':
			escaped = true
			s.pos++ // the escaped byte cannot end the string; encoding/json judges it
		case c < 0x20:
			return "", s.errorf("control character in string")
		case c >= utf8.RuneSelf:
			high = true
		}
		s.pos++
	}
	raw := s.b[start:s.pos]
	s.pos++
	if !escaped && (!high || utf8.Valid(raw)) {
		return string(raw), nil
	}
	var out string
	if err := json.Unmarshal(s.b[start-1:s.pos], &out); err != nil {
		return "", s.errorf("%v", err)
	}
	return out, nil
}

// rawValue returns the bytes of the next value, validated by encoding/json.
func (s *jsonScan) rawValue() (json.RawMessage, error) {
	s.ws()
	start := s.pos
	if s.pos >= len(s.b) {
		return nil, s.errorf("unexpected end of data")
	}
	switch s.b[s.pos] {
	case '"':
		if _, err := s.str(); err != nil {
			return nil, err
		}
		return s.b[start:s.pos], nil
	case '{', '[':
		depth := 0
		for s.pos < len(s.b) {
			c := s.b[s.pos]
			if c == '"' {
				if _, err := s.str(); err != nil {
					return nil, err
				}
				continue
			}
			s.pos++
			switch c {
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return s.validRaw(start)
				}
			}
		}
		return nil, s.errorf("unterminated value")
	}
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ',', '}', ']', ':', ' ', '\t', '\n', '\r':
			return s.validRaw(start)
		}
		s.pos++
	}
	return s.validRaw(start)
}

func (s *jsonScan) validRaw(start int) (json.RawMessage, error) {
	raw := s.b[start:s.pos]
	if !json.Valid(raw) {
		return nil, fmt.Errorf("JSON at byte %d: invalid value %.40q", start, raw)
	}
	if raw[0] == '{' || raw[0] == '[' {
		if err := strictjson.CheckUniqueKeys(raw); err != nil {
			return nil, fmt.Errorf("JSON at byte %d: %v", start, err)
		}
	}
	return raw, nil
}

// uniqueObject is object with every key checked against the earlier ones.
func (s *jsonScan) uniqueObject(where string, field func(key string) error) error {
	seen := map[string]bool{}
	return s.object(func(key string) error {
		if seen[key] {
			return s.errorf("key %q appears twice in %s; remove one of them", key, where)
		}
		seen[key] = true
		return field(key)
	})
}

// object calls field for every key of an object; field must consume the value.
func (s *jsonScan) object(field func(key string) error) error {
	return s.list('{', '}', func(int) error {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		return field(key)
	})
}

// array calls elem for every element of an array; elem must consume it.
func (s *jsonScan) array(elem func(i int) error) error { return s.list('[', ']', elem) }

// list calls item for every comma-separated item between open and end (an object's members or an
// array's elements): one place for the separator and empty-container rules of both.
func (s *jsonScan) list(open, end byte, item func(i int) error) error {
	if err := s.expect(open); err != nil {
		return err
	}
	if s.peek() == end {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := item(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case end:
			s.pos++
			return nil
		default:
			return s.errorf("expected ',' or '%c'", end)
		}
	}
}

// intValue decodes a JSON number into an int as encoding/json would.
func (s *jsonScan) intValue() (int, error) {
	s.ws()
	start, n := s.pos, 0
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' && s.pos-start < 18 {
		n = 10*n + int(s.b[s.pos]-'0')
		s.pos++
	}
	if s.pos > start && (s.b[start] != '0' || s.pos == start+1) {
		if s.pos >= len(s.b) || !isNumberByte(s.b[s.pos]) {
			return n, nil
		}
	}
	s.pos = start
	raw, err := s.rawValue()
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, s.errorf("%v", err)
	}
	return n, nil
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// decodeValue unmarshals the next value into v.
func (s *jsonScan) decodeValue(v any) error {
	raw, err := s.rawValue()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return s.errorf("%v", err)
	}
	return nil
}

// parseTokenizerJSON fills a fileJSON, decoding model.vocab and model.merges
// itself. Merges come back as flat (a, b) string pairs plus whether the file
// used the legacy "a b" form, for parseMerges to resolve.
func parseTokenizerJSON(data []byte) (*fileJSON, error) {
	s := &jsonScan{b: data}
	f := &fileJSON{}
	raws := map[string]*json.RawMessage{
		"truncation": &f.Truncation, "padding": &f.Padding, "normalizer": &f.Normalizer,
		"pre_tokenizer": &f.PreTokenizer, "post_processor": &f.PostProcessor, "decoder": &f.Decoder,
	}
	err := s.uniqueObject("the top-level object", func(key string) error {
		if p, ok := raws[key]; ok {
			raw, err := s.rawValue()
			*p = raw
			return err
		}
		switch key {
		case "added_tokens":
			f.AddedTokens = nil
			return s.decodeValue(&f.AddedTokens)
		case "model":
			if s.peek() == 'n' {
				f.Model = nil
				return s.decodeValue(new(any))
			}
			f.Model = &modelJSON{}
			return parseModelJSON(s, f.Model)
		}
		_, err := s.rawValue()
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.peek() != 0 {
		return nil, s.errorf("data after the top-level object")
	}
	return f, nil
}

func parseModelJSON(s *jsonScan, m *modelJSON) error {
	fields := map[string]any{
		"type": &m.Type, "dropout": &m.Dropout, "unk_token": &m.UnkToken,
		"continuing_subword_prefix": &m.ContinuingSubwordPrefix, "end_of_word_suffix": &m.EndOfWordSuffix,
		"byte_fallback": &m.ByteFallback, "ignore_merges": &m.IgnoreMerges,
	}
	return s.uniqueObject("model", func(key string) error {
		if p, ok := fields[key]; ok {
			return s.decodeValue(p)
		}
		switch key {
		case "vocab":
			m.Vocab = make(map[string]int, 1<<17)
			// The vocabulary map finds repeats itself (an insert that does not grow it),
			// without a second set of 151k keys or a second lookup.
			return s.object(func(tok string) error {
				id, err := s.intValue()
				n := len(m.Vocab)
				m.Vocab[tok] = id
				if len(m.Vocab) == n {
					return s.errorf("token %q appears twice in model.vocab; remove one of them", tok)
				}
				return err
			})
		case "merges":
			m.Merges, m.LegacyMerges, m.HasMerges = m.Merges[:0], false, true
			legacyAt := -1
			return s.array(func(i int) error {
				if s.peek() == '"' {
					if i > 0 && legacyAt < 0 {
						return s.errorf("model.merges[%d]: a string among [a, b] pairs", i)
					}
					legacyAt, m.LegacyMerges = i, true
					l, err := s.str()
					m.Merges = append(m.Merges, l)
					return err
				}
				if legacyAt >= 0 {
					return s.errorf("model.merges[%d]: a pair among \"a b\" strings", i)
				}
				n := 0
				err := s.array(func(int) error {
					t, err := s.str()
					m.Merges = append(m.Merges, t)
					n++
					return err
				})
				if err == nil && n != 2 {
					err = fmt.Errorf("model.merges[%d] has %d elements: a merge is a pair", i, n)
				}
				return err
			})
		}
		_, err := s.rawValue()
		return err
	})
}
