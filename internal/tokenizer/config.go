package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// compiled is everything Encode and Decode need, in the flat form that the
// cache stores; newFromCompiled turns it into a Tokenizer.
type compiled struct {
	Fingerprint  [32]byte // sha256 of the (decompressed) tokenizer.json
	NFC          bool
	IgnoreMerges bool
	NumIDs       int      // max id + 1 over the model vocab and the added tokens
	Known        []bool   // Known[id]: some token has this id
	DecOff       []uint32 // DecData[DecOff[id]:DecOff[id+1]] is id's decoded bytes
	DecData      []byte
	ByteID       [256]int32
	Merges       []int32 // (a, b, merged) triples in rank order
	WholeWord    []int32 // ignore_merges only: model ids whose token is byte-level text
	Added        []addedToken
}

type fileJSON struct {
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *int    `json:"id"`
	Content    *string `json:"content"`
	SingleWord *bool   `json:"single_word"`
	LStrip     *bool   `json:"lstrip"`
	RStrip     *bool   `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    *bool   `json:"special"`
}

type modelJSON struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	ByteFallback            *bool          `json:"byte_fallback"`
	IgnoreMerges            *bool          `json:"ignore_merges"`
	Vocab                   map[string]int `json:"-"`
	Merges                  []string       `json:"-"` // pairs a0, b0, a1, b1, ... or legacy "a b" lines
	LegacyMerges            bool           `json:"-"`
	HasMerges               bool           `json:"-"`
}

// component is the "type"-tagged object HF uses for every pipeline stage.
type component struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         *bool  `json:"invert"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func parseComponent(field string, raw json.RawMessage) (*component, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	return &c, nil
}

// compileJSON parses and validates tokenizer.json. It implements exactly the
// pipeline it declares and rejects, naming the field, every stage or option it
// does not implement, rather than tokenizing differently from HF.
func compileJSON(data []byte, fingerprint [32]byte) (*compiled, error) {
	f, err := parseTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	c := &compiled{Fingerprint: fingerprint}
	if c.NFC, err = checkPipeline(f); err != nil {
		return nil, err
	}
	m := f.Model
	if err := checkModel(m); err != nil {
		return nil, err
	}
	// unk_token and byte_fallback only act on characters missing from the
	// vocabulary; after the ByteLevel pre-tokenizer every character is one of
	// the 256 byte symbols, which are required below, so both are inert.
	c.IgnoreMerges = m.IgnoreMerges != nil && *m.IgnoreMerges
	byID, known, err := vocabByID(m.Vocab)
	if err != nil {
		return nil, err
	}
	if c.ByteID, err = byteSymbolIDs(m.Vocab); err != nil {
		return nil, err
	}
	if c.Merges, err = resolveMerges(m, m.Vocab); err != nil {
		return nil, err
	}
	if c.Added, err = resolveAdded(f.AddedTokens, m.Vocab, c.NFC); err != nil {
		return nil, err
	}
	if err := c.buildDecodeTable(byID, known, len(m.Vocab)); err != nil {
		return nil, err
	}
	return c, nil
}

// checkPipeline accepts only the stages Encode implements: no truncation or
// padding, a supported normalizer (reporting whether it is NFC), pre-tokenizer
// and post-processor, and the ByteLevel decoder.
func checkPipeline(f *fileJSON) (nfc bool, err error) {
	if !isNull(f.Truncation) {
		return false, fmt.Errorf("truncation is %s: only null is supported (Encode never truncates); remove it", f.Truncation)
	}
	if !isNull(f.Padding) {
		return false, fmt.Errorf("padding is %s: only null is supported (Encode never pads); remove it", f.Padding)
	}
	if nfc, err = checkNormalizer("normalizer", f.Normalizer); err != nil {
		return false, err
	}
	if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return false, err
	}
	if err := checkPostProcessor("post_processor", f.PostProcessor); err != nil {
		return false, err
	}
	dec, err := parseComponent("decoder", f.Decoder)
	if err != nil {
		return false, err
	}
	if dec == nil || dec.Type != "ByteLevel" {
		return false, fmt.Errorf("decoder is %s: only ByteLevel is supported", compactJSON(f.Decoder))
	}
	return nfc, nil
}

// checkModel accepts a deterministic BPE model without word affixes.
func checkModel(m *modelJSON) error {
	if m == nil {
		return fmt.Errorf("model is missing")
	}
	if m.Type != "BPE" {
		return fmt.Errorf("model.type is %q: only BPE is supported", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("model.dropout is %v: BPE dropout is random; only null or 0 is supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("model.continuing_subword_prefix is %q: only null or \"\" is supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("model.end_of_word_suffix is %q: only null or \"\" is supported", *m.EndOfWordSuffix)
	}
	if len(m.Vocab) == 0 {
		return fmt.Errorf("model.vocab is empty")
	}
	return nil
}

// vocabByID lays the vocabulary out by id. The decode table is dense, so ids
// must not be far sparser than the tokens, and each id names one token.
func vocabByID(vocab map[string]int) (byID []string, known []bool, err error) {
	maxID := 0
	for tok, id := range vocab {
		if id < 0 || id >= math.MaxInt32 {
			return nil, nil, fmt.Errorf("model.vocab[%q] = %d: ids must be in [0, %d)", tok, id, math.MaxInt32)
		}
		maxID = max(maxID, id)
	}
	if err := checkDensity(maxID, len(vocab)); err != nil {
		return nil, nil, err
	}
	byID = make([]string, maxID+1)
	known = make([]bool, maxID+1)
	for tok, id := range vocab {
		if known[id] {
			a, b := min(tok, byID[id]), max(tok, byID[id])
			return nil, nil, fmt.Errorf("model.vocab: %q and %q share id %d; ids must be unique", a, b, id)
		}
		byID[id], known[id] = tok, true
	}
	return byID, known, nil
}

// byteSymbolIDs is the id of each byte's ByteLevel symbol; a ByteLevel BPE
// must cover all 256.
func byteSymbolIDs(vocab map[string]int) ([256]int32, error) {
	var ids [256]int32
	for b := 0; b < 256; b++ {
		sym := string(byteToRune[b])
		id, ok := vocab[sym]
		if !ok {
			return ids, fmt.Errorf("model.vocab lacks %q, the byte-level symbol of byte 0x%02X: a ByteLevel BPE must cover all 256 bytes", sym, b)
		}
		ids[b] = int32(id)
	}
	return ids, nil
}

// buildDecodeTable extends the vocabulary's id table (byID, known; vocabSize
// tokens) with the added tokens and fills the whole-word list and the dense
// decode table.
func (c *compiled) buildDecodeTable(byID []string, known []bool, vocabSize int) error {
	maxID := len(byID) - 1
	for _, t := range c.Added {
		maxID = max(maxID, t.ID)
	}
	if err := checkDensity(maxID, vocabSize+len(c.Added)); err != nil {
		return err
	}
	numIDs := maxID + 1
	byID = append(byID, make([]string, numIDs-len(byID))...)
	known = append(known, make([]bool, numIDs-len(known))...)
	if c.IgnoreMerges {
		for id, tok := range byID {
			if known[id] && isByteLevelText(tok) {
				c.WholeWord = append(c.WholeWord, int32(id))
			}
		}
	}
	// HF's decoder receives an added token's content (normalized when the
	// token is), even where the id is also a vocabulary entry.
	for _, t := range c.Added {
		byID[t.ID], known[t.ID] = t.Pattern, true
	}
	c.NumIDs = numIDs
	c.Known = known
	c.DecOff = make([]uint32, numIDs+1)
	for id, tok := range byID {
		if known[id] {
			c.DecData = append(c.DecData, byteLevelDecode(tok)...)
		}
		if len(c.DecData) > math.MaxUint32 {
			return fmt.Errorf("model.vocab: decoded tokens exceed 4 GiB")
		}
		c.DecOff[id+1] = uint32(len(c.DecData))
	}
	return nil
}

func checkDensity(maxID, tokens int) error {
	if limit := 2*tokens + 1024; maxID >= limit {
		return fmt.Errorf("model.vocab/added_tokens: id %d among %d tokens; ids this sparse are not supported", maxID, tokens)
	}
	return nil
}

func isByteLevelText(tok string) bool {
	for _, r := range tok {
		if _, ok := runeToByte[r]; !ok {
			return false
		}
	}
	return true
}

func compactJSON(raw json.RawMessage) string {
	if isNull(raw) {
		return "null"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// checkNormalizer accepts null, NFC, and Sequences of those; it reports
// whether NFC is applied.
func checkNormalizer(field string, raw json.RawMessage) (bool, error) {
	c, err := parseComponent(field, raw)
	if err != nil || c == nil {
		return false, err
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		nfc := false
		for i, sub := range c.Normalizers {
			n, err := checkNormalizer(fmt.Sprintf("%s.normalizers[%d]", field, i), sub)
			if err != nil {
				return false, err
			}
			nfc = nfc || n // NFC is idempotent, so repeating it changes nothing
		}
		return nfc, nil
	}
	return false, fmt.Errorf("%s is %s: only NFC (or null) is supported", field, compactJSON(raw))
}

// checkPreTokenizer accepts exactly Qwen's Sequence[Split(pattern, Isolated),
// ByteLevel(add_prefix_space=false, use_regex=false)].
func checkPreTokenizer(raw json.RawMessage) error {
	const want = `Sequence[Split{Regex: Qwen pattern, behavior: Isolated, invert: false}, ByteLevel{add_prefix_space: false, use_regex: false}]`
	c, err := parseComponent("pre_tokenizer", raw)
	if err != nil {
		return err
	}
	if c == nil || c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return fmt.Errorf("pre_tokenizer is %s: only %s is supported", compactJSON(raw), want)
	}
	split, err := parseComponent("pre_tokenizer.pretokenizers[0]", c.Pretokenizers[0])
	if err != nil {
		return err
	}
	if split == nil || split.Type != "Split" || split.Pattern == nil || split.Pattern.Regex == nil {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0] is %s: only %s is supported", compactJSON(c.Pretokenizers[0]), want)
	}
	if *split.Pattern.Regex != qwenSplitPattern {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].pattern.Regex is %q: only the Qwen2/Qwen3 pattern %q is implemented", *split.Pattern.Regex, qwenSplitPattern)
	}
	if split.Behavior != "Isolated" {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].behavior is %q: only \"Isolated\" is supported", split.Behavior)
	}
	if split.Invert != nil && *split.Invert {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0].invert is true: only false is supported")
	}
	bl, err := parseComponent("pre_tokenizer.pretokenizers[1]", c.Pretokenizers[1])
	if err != nil {
		return err
	}
	if bl == nil || bl.Type != "ByteLevel" {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1] is %s: only %s is supported", compactJSON(c.Pretokenizers[1]), want)
	}
	if bl.AddPrefixSpace != nil && *bl.AddPrefixSpace {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1].add_prefix_space is true: only false is supported")
	}
	// HF defaults use_regex to true (the GPT-2 split), which is not implemented.
	if bl.UseRegex == nil || *bl.UseRegex {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1].use_regex is %v: only false is supported", bl.UseRegex == nil || *bl.UseRegex)
	}
	return nil
}

// checkPostProcessor accepts the processors that only add special tokens or
// adjust offsets: Encode never adds special tokens and returns no offsets, so
// none of them changes its ids.
func checkPostProcessor(field string, raw json.RawMessage) error {
	c, err := parseComponent(field, raw)
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing":
		return nil
	case "Sequence":
		for i, sub := range c.Processors {
			if err := checkPostProcessor(fmt.Sprintf("%s.processors[%d]", field, i), sub); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s is %s: only ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing or Sequence is supported", field, compactJSON(raw))
}

// resolveMerges turns model.merges, read as [a, b] pairs or as legacy "a b"
// strings (lines starting with "#version" skipped, exactly one space each),
// into (a, b, merged) id triples in rank order.
func resolveMerges(m *modelJSON, vocab map[string]int) ([]int32, error) {
	if !m.HasMerges {
		return nil, fmt.Errorf("model.merges is missing")
	}
	pairs := m.Merges
	if m.LegacyMerges {
		pairs = make([]string, 0, 2*len(m.Merges))
		for _, l := range m.Merges {
			if strings.HasPrefix(l, "#version") {
				continue
			}
			a, b, ok := strings.Cut(l, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("model.merges[%d] is %q: a legacy merge must be two tokens separated by one space", len(pairs)/2, l)
			}
			pairs = append(pairs, a, b)
		}
	}
	out := make([]int32, 0, 3*len(pairs)/2)
	var buf []byte
	for i := 0; i+1 < len(pairs); i += 2 {
		a, okA := vocab[pairs[i]]
		b, okB := vocab[pairs[i+1]]
		buf = append(append(buf[:0], pairs[i]...), pairs[i+1]...)
		ab, okAB := vocab[string(buf)] // no allocation: the compiler special-cases map[string(bytes)]
		switch {
		case !okA:
			return nil, fmt.Errorf("model.merges[%d]: %q is not in model.vocab", i/2, pairs[i])
		case !okB:
			return nil, fmt.Errorf("model.merges[%d]: %q is not in model.vocab", i/2, pairs[i+1])
		case !okAB:
			return nil, fmt.Errorf("model.merges[%d]: the merged token %q is not in model.vocab", i/2, buf)
		}
		out = append(out, int32(a), int32(b), int32(ab))
	}
	return out, nil
}

// resolveAdded replays HF's AddedVocabulary::add_tokens over the declared
// added tokens: empty contents are ignored, a content already in the vocabulary
// (or added before) keeps that id, others get consecutive ids after the
// vocabulary. HF only warns when a declared id disagrees and then uses its own;
// this package refuses such a file instead of guessing which one was meant.
func resolveAdded(list []addedTokenJSON, vocab map[string]int, nfc bool) ([]addedToken, error) {
	byContent := map[string]int{} // content -> index in out
	var out []addedToken
	nextID := len(vocab)
	for i, j := range list {
		field := fmt.Sprintf("added_tokens[%d]", i)
		if j.Content == nil || j.ID == nil || j.SingleWord == nil || j.LStrip == nil || j.RStrip == nil || j.Normalized == nil || j.Special == nil {
			return nil, fmt.Errorf("%s: id, content, single_word, lstrip, rstrip, normalized and special are all required (as in HF)", field)
		}
		t := addedToken{
			ID: *j.ID, Content: *j.Content, Pattern: *j.Content,
			SingleWord: *j.SingleWord, LStrip: *j.LStrip, RStrip: *j.RStrip,
			Normalized: *j.Normalized, Special: *j.Special,
		}
		if t.Content == "" {
			continue
		}
		if t.Normalized && nfc {
			t.Pattern = norm.NFC.String(t.Content)
		}
		var want int
		if k, ok := byContent[t.Content]; ok {
			want = out[k].ID
		} else if id, ok := vocab[t.Content]; ok {
			want = id
		} else {
			want = nextID
			nextID++
		}
		if t.ID != want {
			return nil, fmt.Errorf("%s (%q) declares id %d but HF tokenizers would give it id %d (existing vocab id, or the next id after %d model tokens); fix the id", field, t.Content, t.ID, want, len(vocab))
		}
		if k, ok := byContent[t.Content]; ok {
			out[k] = t // the later declaration's flags win, as in HF
			continue
		}
		byContent[t.Content] = len(out)
		out = append(out, t)
	}
	// Both matchers need distinct patterns (HF's automaton builder rejects
	// duplicates too).
	seen := map[[2]string]string{}
	for _, t := range out {
		key := [2]string{fmt.Sprint(t.Normalized), t.Pattern}
		if other, dup := seen[key]; dup {
			return nil, fmt.Errorf("added_tokens: %q and %q both match the text %q", other, t.Content, t.Pattern)
		}
		seen[key] = t.Content
	}
	return out, nil
}
