package unigram

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// hfVocab is the tokenizer.json test vocabulary. Scores are exact binary
// fractions so the hand sums below are exact. The lowest score is uuu's -30, so
// an unknown character scores -30 - 10 = -40.
var hfVocab = [][2]any{
	{"<pad>", 0.0}, // 0
	{"</s>", 0.0},  // 1
	{"<unk>", 0.0}, // 2
	{"▁", -2.0},    // 3
	{"▁a", -1.0},   // 4
	{"a", -1.5},    // 5
	{"b", -2.0},    // 6
	{"ab", -2.5},   // 7
	{"▁ab", -4.0},  // 8
	{"▁x", -1.0},   // 9
	{"y", -2.0},    // 10
	{"xy", -1.0},   // 11
	{"uuu", -30.0}, // 12
	{"E", -3.0},    // 13
	{"▁E", -2.5},   // 14
	{"é", -3.0},    // 15
	{"A", -2.0},    // 16
	{"▁A", -1.5},   // 17
	{"f", -2.0},    // 18
	{"i", -2.0},    // 19
	{"fi", -1.0},   // 20
	{"▁fi", -3.5},  // 21
}

func mustHF(t testing.TB, h hfSpec, opts Options) *Tokenizer {
	t.Helper()
	tok, err := FromTokenizerJSON(h.json(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type encCase struct {
	text string
	want []int
	why  string
}

func runCases(t *testing.T, tok *Tokenizer, cases []encCase) {
	t.Helper()
	for _, c := range cases {
		got, err := tok.Encode(c.text)
		if err != nil {
			t.Errorf("Encode(%q): %v", c.text, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			pieces, _ := tok.Tokens(c.text)
			t.Errorf("Encode(%q) = %v %q, want %v (%s)", c.text, got, pieces, c.want, c.why)
		}
	}
}

// TestViterbiHF checks segmentations worked out by hand on the T5 pipeline
// (Replace " {2,}" -> " ", WhitespaceSplit, Metaspace "always"): every word
// gets a leading ▁ and is segmented on its own, maximizing the sum of scores.
func TestViterbiHF(t *testing.T) {
	tok := mustHF(t, t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, nil), Options{})
	runCases(t, tok, []encCase{
		{"ab", []int{4, 6}, "▁ab: [▁a][b] = -1-2 = -3 beats [▁ab] -4, [▁][ab] -2-2.5 = -4.5, [▁][a][b] -5.5"},
		{"xy", []int{3, 11}, "tie: [▁][xy] = -2-1 = -3 and [▁x][y] = -1-2 = -3. The best path into the end byte is " +
			"fixed by the first candidate: starts are scanned left to right, so xy (starting after ▁) is " +
			"seen before y (starting after ▁x), and an equal later score does not replace it: the path " +
			"whose last piece starts earliest wins"},
		{"a☃☃b", []int{4, 2, 6}, "☃ has no piece: each gets an unknown node (-30-10 = -40); [▁a][☃][☃][b] = -83; " +
			"the two consecutive unknown nodes are fused into one <unk>"},
		{"uuuu", []int{3, 2, 12}, "u alone is no piece, so every u also gets an unknown node (-40). " +
			"[▁][uuu][?u] = -2-30-40 = -72 ties [▁][?u][uuu] = -2-40-30 = -72; into the end byte, uuu " +
			"starting at the 2nd u is scanned before the unknown node at the 4th u, so [▁][<unk>][uuu] " +
			"wins; [▁] + four unknowns = -162"},
		{"  a \t b\n", []int{4, 3, 6}, "WhitespaceSplit drops every whitespace run: words ▁a and ▁b; " +
			"▁b = [▁][b] = -4 (no ▁b piece)"},
		{"a</s>b", []int{4, 1, 3, 6}, "</s> is an added token split out of the raw text; the text after it " +
			"is its own segment and gets its own ▁"},
		{"", nil, "empty text"},
		{"   ", nil, "whitespace only"},
	})
	for _, c := range []struct {
		text string
		max  int
		want []int
	}{
		{"ab", 0, []int{4, 6, 1}},             // TemplateProcessing "$A </s>"
		{"ab", 512, []int{4, 6, 1}},           // no truncation needed
		{"ab ab", 3, []int{4, 6, 1}},          // 4 text ids cut to 3-1 = 2, then </s>
		{"ab ab", 1, []int{1}},                // only </s> fits
		{"", 512, []int{1}},                   // an empty prompt is just </s>
		{"a☃☃b", 512, []int{4, 2, 6, 1}},      //
		{"a</s>b", 512, []int{4, 1, 3, 6, 1}}, //
	} {
		got, err := tok.EncodeWithSpecial(c.text, c.max)
		if err != nil {
			t.Fatalf("EncodeWithSpecial(%q, %d): %v", c.text, c.max, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("EncodeWithSpecial(%q, %d) = %v, want %v", c.text, c.max, got, c.want)
		}
	}
	if tok.EOSID() != 1 || tok.PadID() != 0 || tok.UnkID() != 2 || tok.VocabSize() != len(hfVocab) || tok.Source() != "tokenizer.json" {
		t.Fatalf("eos %d pad %d unk %d size %d source %s", tok.EOSID(), tok.PadID(), tok.UnkID(), tok.VocabSize(), tok.Source())
	}
	if id, ok := tok.ID("▁ab"); !ok || id != 8 {
		t.Fatalf("ID(▁ab) = %d, %v", id, ok)
	}
}

// TestMetaspaceVariants checks Metaspace without WhitespaceSplit: spaces become
// ▁ and the text is split before every ▁ (MergedWithNext).
func TestMetaspaceVariants(t *testing.T) {
	ms := func(extra map[string]any) hfSpec {
		m := map[string]any{"type": "Metaspace", "replacement": "▁"}
		for k, v := range extra {
			m[k] = v
		}
		return hfSpec{vocab: hfVocab, unkID: 2, preTokenizer: m}
	}
	runCases(t, mustHF(t, ms(map[string]any{"prepend_scheme": "always", "split": true}), Options{}), []encCase{
		{"a  b", []int{4, 3, 3, 6}, "▁a▁▁b splits into ▁a | ▁ | ▁b; ▁b = [▁][b]"},
		{"▁a", []int{4}, "text already starting with ▁ gets no second one"},
	})
	runCases(t, mustHF(t, ms(map[string]any{"prepend_scheme": "never"}), Options{}), []encCase{
		{"a b", []int{5, 3, 6}, "a▁b splits into a | ▁b; a alone = 5"},
	})
	runCases(t, mustHF(t, ms(map[string]any{"add_prefix_space": false}), Options{}), []encCase{
		{"a b", []int{5, 3, 6}, "legacy add_prefix_space=false means never"},
	})
	runCases(t, mustHF(t, ms(map[string]any{"prepend_scheme": "always", "split": false}), Options{}), []encCase{
		{"a b", []int{4, 3, 6}, "one word ▁a▁b: [▁a][▁][b] = -1-2-2 = -5 beats [▁][a][▁][b] = -7.5"},
	})
	first := ms(map[string]any{"prepend_scheme": "first"})
	first.added = []map[string]any{special(1, "</s>")}
	runCases(t, mustHF(t, first, Options{}), []encCase{
		{"a</s>b", []int{4, 1, 6}, "only the segment at the start of the text gets the ▁"},
	})
	if _, err := FromTokenizerJSON(first.json(t), Options{Strict: true}); err == nil || !strings.Contains(err.Error(), "first") {
		t.Fatalf("Strict with prepend_scheme first: err = %v", err)
	}
}

// TestPrecompiledHF checks HF's Precompiled normalizer on a charsmap built here:
// graphemes shorter than 6 bytes are looked up whole and replaced by the entry
// of their SHORTEST matching prefix; longer ones character by character.
func TestPrecompiledHF(t *testing.T) {
	{ // extended darts offsets are covered by TestCharsmapSearch
		cm := buildCharsmap(t, testRules, 0)
		tok := mustHF(t, t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, cm), Options{Strict: true})
		runCases(t, tok, []encCase{
			{"\uFB01", []int{3, 20}, "ﬁ -> fi; ▁fi: [▁][fi] = -2-1 = -3 beats [▁fi] -3.5 and [▁][f][i] -6"},
			{"\uFF21\tb", []int{17, 3, 6}, "Ａ -> A, tab -> space: words ▁A (-1.5) and ▁b = [▁][b]"},
			{"\uFF25\u0301", []int{14}, "Ｅ + U+0301 is one 5-byte grapheme; its shortest matching prefix Ｅ maps " +
				"to E, which replaces the whole grapheme: the accent is dropped (HF's behaviour)"},
			{"\uFF25\u0301\u0301", []int{14, 2}, "7-byte grapheme: per character, Ｅ -> E and both accents kept; " +
				"they have no piece and fuse into one <unk>"},
			{"e\u0301", []int{3, 15}, "e + U+0301 has its own entry -> é; [▁][é] = -5"},
			{"x\u200By", []int{3, 11}, "zero-width space removed, then the xy tie as above"},
			{"\uFF21\uFF21", []int{17, 16}, "two graphemes, each Ａ -> A (the two-character key ＡＡ is never " +
				"tried whole); ▁AA = [▁A][A] = -3.5"},
		})
	}
}

func TestByteFallbackHF(t *testing.T) {
	vocab := append(append([][2]any{}, hfVocab...), [2]any{"<0xE2>", 0.0}, [2]any{"<0x98>", 0.0}, [2]any{"<0x83>", 0.0})
	tok := mustHF(t, t5Pipeline(hfSpec{vocab: vocab, unkID: 2, byteFallback: true}, nil), Options{})
	n := len(hfVocab)
	runCases(t, tok, []encCase{
		{"a☃", []int{4, n, n + 1, n + 2}, "☃ = E2 98 83 is unknown; its bytes all have <0xXX> pieces"},
		{"a☂", []int{4, 2}, "☂ = E2 98 82: <0x82> is missing, so the unknown token stays"},
	})
	noUnk := mustHF(t, t5Pipeline(hfSpec{vocab: hfVocab, unkID: nil}, nil), Options{})
	if _, err := noUnk.Encode("a☃"); err == nil || !strings.Contains(err.Error(), "unk") {
		t.Fatalf("unknown character without unk_id: err = %v", err)
	}
}

// spVocab is the spiece.model test vocabulary. SentencePiece takes the unknown
// score from NORMAL pieces only: min -6 (z) -> -16; max_score starts at FLT_MIN
// and all NORMAL scores are negative, so a user-defined piece scores
// length*FLT_MIN - 0.1 ≈ -0.1.
var spVocab = []spPiece{
	{"<pad>", 0, typeControl},     // 0
	{"</s>", 0, typeControl},      // 1
	{"<unk>", 0, typeUnknown},     // 2
	{"▁", -2, typeNormal},         // 3
	{"▁a", -1, typeNormal},        // 4
	{"a", -1.5, typeNormal},       // 5
	{"b", -2, typeNormal},         // 6
	{"▁ab", -4, typeNormal},       // 7
	{"<sep>", 0, typeUserDefined}, // 8
	{"zz", -0.5, typeUnused},      // 9
	{"z", -6, typeNormal},         // 10
	{"E", -3, typeNormal},         // 11
	{"é", -3, typeNormal},         // 12
	{"▁E", -2.5, typeNormal},      // 13
	{"A", -2, typeNormal},         // 14
	{"!", -1, typeNormal},         // 15
	{"▁A", -1.5, typeNormal},      // 16
}

func spModel(t *testing.T, mod func(*spSpec)) *Tokenizer {
	t.Helper()
	s := spSpec{pieces: spVocab, eosID: 1, padID: 0, charsmap: buildCharsmap(t, testRules, 0), dummyPrefix: true, removeExtra: true, escape: true}
	if mod != nil {
		mod(&s)
	}
	tok, err := FromSentencePiece(s.serialize(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestSentencePieceModel checks a spiece.model serialized here, tokenized with
// SentencePiece's own rules (whole-text lattice, longest-match charsmap).
func TestSentencePieceModel(t *testing.T) {
	tok := spModel(t, nil)
	runCases(t, tok, []encCase{
		{"  a  b  ", []int{4, 3, 6}, "leading spaces dropped, dummy ▁ added, the space run collapsed, trailing " +
			"dropped: ▁a▁b = [▁a][▁][b] = -5 (no ▁b piece; [▁][a][▁][b] = -7.5)"},
		{"a<sep>b", []int{4, 8, 6}, "user-defined <sep> is kept verbatim and scores 5*FLT_MIN-0.1: " +
			"[▁a][<sep>][b] ≈ -3.1"},
		{"</s>", []int{3, 2}, "control pieces are never matched in text: ▁ then four unknown characters, " +
			"merged into one <unk>"},
		{"zz", []int{3, 10, 10}, "the UNUSED piece zz (-0.5) is skipped: [▁][z][z] = -14; z exists, so no " +
			"unknown node"},
		{"\uFF25\u0301", []int{13, 2}, "longest match: Ｅ -> E, U+0301 kept (unlike HF): [▁E] -2.5 + unknown -16"},
		{"e\u0301", []int{3, 12}, "the two-character key wins the longest match -> é; [▁][é] = -5"},
		{"a\tb\n", []int{4, 3, 6}, "tab and newline map to spaces; the trailing one is dropped"},
		{"\uFF21\uFF21", []int{16, 14, 15}, "longest match takes the two-character key ＡＡ -> AA!: " +
			"[▁A][A][!] = -4.5 beats [▁][A][A][!] = -7"},
		{"\u3000a", []int{4}, "an ideographic space maps to a space and is dropped as leading whitespace"},
		{"", nil, "empty"},
	})
	if got, err := tok.EncodeWithSpecial("ab", 512); err != nil || !reflect.DeepEqual(got, []int{4, 6, 1}) {
		t.Fatalf("EncodeWithSpecial(ab) = %v, %v; want [▁a b </s>] = [4 6 1] ([▁a][b] -3 beats [▁ab] -4)", got, err)
	}
	if tok.EOSID() != 1 || tok.PadID() != 0 || tok.UnkID() != 2 || tok.Source() != "spiece.model" {
		t.Fatalf("eos %d pad %d unk %d source %s", tok.EOSID(), tok.PadID(), tok.UnkID(), tok.Source())
	}

	noDummy := spModel(t, func(s *spSpec) { s.dummyPrefix = false })
	runCases(t, noDummy, []encCase{{"a b", []int{5, 3, 6}, "no dummy ▁: a▁b = [a][▁][b] = -5.5"}})
	keepSpaces := spModel(t, func(s *spSpec) { s.removeExtra = false })
	runCases(t, keepSpaces, []encCase{{" a  b ", []int{3, 4, 3, 3, 6, 3},
		"whitespace kept: ▁ + ▁a▁▁b▁ = [▁][▁a][▁][▁][b][▁]"}})

	withBytes := spModel(t, func(s *spSpec) {
		s.byteFallback = true
		s.pieces = append([]spPiece{}, spVocab...)
		for b := 0; b < 256; b++ {
			s.pieces = append(s.pieces, spPiece{piece: byteName(b), typ: typeByte})
		}
	})
	n := len(spVocab)
	runCases(t, withBytes, []encCase{{"a☃", []int{4, n + 0xE2, n + 0x98, n + 0x83}, "unknown ☃ -> its three byte pieces"}})
}

func byteName(b int) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">"
}

func TestSentencePieceErrors(t *testing.T) {
	base := spSpec{pieces: spVocab, eosID: 1, padID: 0, dummyPrefix: true, removeExtra: true, escape: true}
	for name, mod := range map[string]func(*spSpec){
		"no unknown piece":                  func(s *spSpec) { s.pieces = s.pieces[3:] },
		"byte fallback without byte pieces": func(s *spSpec) { s.byteFallback = true },
		"duplicate piece": func(s *spSpec) {
			s.pieces = append(append([]spPiece{}, s.pieces...), spPiece{"▁a", -3, typeNormal})
		},
	} {
		s := base
		mod(&s)
		if _, err := FromSentencePiece(s.serialize(), Options{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, data := range map[string][]byte{
		"truncated": base.serialize()[:40],
		"garbage":   []byte{0xFF, 0xFF, 0xFF},
	} {
		if _, err := FromSentencePiece(data, Options{}); err == nil {
			t.Errorf("%s model: accepted", name)
		}
	}
	bpe := pbBytes(pbBytes(nil, 1, pbBytes(pbFloat(nil, 2, 0), 1, []byte("<unk>"))), 2, pbUint(nil, 3, 2))
	if _, err := FromSentencePiece(bpe, Options{}); err == nil || !strings.Contains(err.Error(), "model_type 2") {
		t.Errorf("BPE model: err = %v", err)
	}
}

func TestCharsmapSearch(t *testing.T) {
	for _, rootBase := range []int{0, 1 << 21} {
		cm, err := parseCharsmap(buildCharsmap(t, testRules, rootBase))
		if err != nil {
			t.Fatal(err)
		}
		var lengths []int
		cm.prefixMatches("\uFF21\uFF21x", func(n int, _ uint32) bool { lengths = append(lengths, n); return true })
		if !reflect.DeepEqual(lengths, []int{3, 6}) {
			t.Errorf("rootBase %d: prefix matches of ＡＡx have lengths %v, want [3 6]", rootBase, lengths)
		}
		if r, ok := cm.transformHF("\uFF21\uFF21"); !ok || r != "A" {
			t.Errorf("transformHF(ＡＡ) = %q, %v; want the shortest prefix's A", r, ok)
		}
		if r, n := cm.prefixSP("\uFF21\uFF21"); r != "AA!" || n != 6 {
			t.Errorf("prefixSP(ＡＡ) = %q, %d; want the longest key's AA!, 6", r, n)
		}
		if r, n := cm.prefixSP("q\uFF21"); r != "q" || n != 1 {
			t.Errorf("prefixSP(qＡ) = %q, %d; want q, 1", r, n)
		}
		if r, n := cm.prefixSP("\xFFa"); r != "\uFFFD" || n != 1 {
			t.Errorf("prefixSP(malformed) = %q, %d; want U+FFFD consuming 1 byte", r, n)
		}
		if _, ok := cm.transformHF("\u200C"); ok {
			t.Errorf("transformHF(ZWNJ) matched a key that is not in the map")
		}
		if got := cm.normalizeHF("\uFF21\u200Bb\te\u0301"); got != "Ab é" {
			t.Errorf("normalizeHF = %q, want %q", got, "Ab é")
		}
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0}, {8, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := parseCharsmap(bad); err == nil {
			t.Errorf("parseCharsmap(%v) accepted corrupt data", bad)
		}
	}
}

func TestGraphemes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"ab", []string{"a", "b"}},
		{"\r\n", []string{"\r\n"}},                                                         // GB3
		{"a\u0301\u0302b", []string{"a\u0301\u0302", "b"}},                                 // GB9
		{"\n\u0301", []string{"\n", "\u0301"}},                                             // GB4
		{"a\u00AD", []string{"a", "\u00AD"}},                                               // GB5: soft hyphen is Control
		{"\u1100\u1161\u11A8", []string{"\u1100\u1161\u11A8"}},                             // GB6-8 Hangul L V T
		{"\u0600" + "1", []string{"\u06001"}},                                              // GB9b Prepend
		{"\U0001F1FA\U0001F1F8\U0001F1EB", []string{"\U0001F1FA\U0001F1F8", "\U0001F1EB"}}, // GB12/13
		{"a\u200Db", []string{"a\u200D", "b"}},                                             // ZWJ extends; GB11 not needed here
		{"\u0915\u093F", []string{"\u0915\u093F"}},                                         // Devanagari vowel sign (SpacingMark)
	} {
		var got []string
		forEachGrapheme(c.in, func(g string) { got = append(got, g) })
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("graphemes(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStrictAndUnsupported(t *testing.T) {
	bad := t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, nil)
	bad.normalizer = map[string]any{"type": "Precompiled", "precompiled_charsmap": "AAAA"} // 3 bytes: corrupt
	if _, err := FromTokenizerJSON(bad.json(t), Options{Strict: true}); err == nil || !strings.Contains(err.Error(), "Precompiled") {
		t.Fatalf("Strict with a corrupt charsmap: err = %v", err)
	}
	tok := mustHF(t, bad, Options{})
	runCases(t, tok, []encCase{{"\uFB01", []int{3, 20}, "the NFKC stand-in also maps ﬁ -> fi"}})

	look := t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, nil)
	look.normalizer = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": `a(?=b)`}, "content": "x"}
	if _, err := FromTokenizerJSON(look.json(t), Options{Strict: true}); err == nil {
		t.Fatal("Strict accepted a look-ahead regex")
	}
	// Without Strict, regexp2 runs it: "ab a" -> "xb a" -> ▁xb = [▁x][b] (-3), ▁a.
	if got, err := mustHF(t, look, Options{}).Tokens("ab a"); err != nil || !reflect.DeepEqual(got, []string{"▁x", "b", "▁a"}) {
		t.Fatalf("regexp2 Replace a(?=b) -> x: %q, %v; want [▁x b ▁a]", got, err)
	}

	for name, mod := range map[string]func(*hfSpec){
		"BPE model":             func(h *hfSpec) {},
		"unknown normalizer":    func(h *hfSpec) { h.normalizer = map[string]any{"type": "BertNormalizer"} },
		"unknown pre-tokenizer": func(h *hfSpec) { h.preTokenizer = map[string]any{"type": "ByteLevel"} },
		"bad vocab entry":       func(h *hfSpec) { h.vocab = [][2]any{{"a", "x"}} },
	} {
		h := t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, nil)
		mod(&h)
		data := h.json(t)
		if name == "BPE model" {
			data = []byte(strings.Replace(string(data), `"type":"Unigram"`, `"type":"BPE"`, 1))
		}
		if _, err := FromTokenizerJSON(data, Options{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	post := t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, nil)
	post.post = map[string]any{"type": "BertProcessing"}
	if _, err := FromTokenizerJSON(post.json(t), Options{Strict: true}); err == nil {
		t.Error("Strict accepted a BertProcessing post-processor")
	}
	if got, _ := mustHF(t, post, Options{}).EncodeWithSpecial("ab", 0); !reflect.DeepEqual(got, []int{4, 6, 1}) {
		t.Errorf("non-strict unsupported post-processor: %v, want the T5 convention [4 6 1]", got)
	}
}

func TestLoadFolder(t *testing.T) {
	dir := t.TempDir()
	hf := t5Pipeline(hfSpec{vocab: hfVocab, unkID: 2}, buildCharsmap(t, testRules, 0))
	sp := spSpec{pieces: spVocab, eosID: 1, padID: 0, charsmap: buildCharsmap(t, testRules, 0), dummyPrefix: true, removeExtra: true, escape: true}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), hf.json(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spiece.model"), sp.serialize(), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Source() != "tokenizer.json" {
		t.Fatalf("folder with both files loaded %s; tokenizer.json must win (transformers loads it)", a.Source())
	}
	b, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint() != b.Fingerprint() || !strings.HasPrefix(a.Fingerprint(), "unigram:") {
		t.Fatalf("fingerprints of the same file differ: %s %s", a.Fingerprint(), b.Fingerprint())
	}
	if err := os.Remove(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Source() != "spiece.model" || c.Fingerprint() == a.Fingerprint() {
		t.Fatalf("fallback loaded %s with fingerprint %s", c.Source(), c.Fingerprint())
	}
	if _, err := Load(t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("empty folder: err = %v", err)
	}
}

// TestAddedTokenFlags checks lstrip / rstrip / single_word on the Metaspace-only
// pipeline, where spaces next to an added token are visible as ▁ words.
func TestAddedTokenFlags(t *testing.T) {
	sep := len(hfVocab) // an added token outside the model vocabulary gets the next id
	mk := func(flags map[string]any) *Tokenizer {
		tok := map[string]any{"id": sep, "content": "<sep>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}
		for k, v := range flags {
			tok[k] = v
		}
		h := hfSpec{vocab: hfVocab, unkID: 2, added: []map[string]any{tok},
			preTokenizer: map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}}
		tk := mustHF(t, h, Options{})
		if p, ok := tk.Piece(sep); !ok || p != "<sep>" {
			t.Fatalf("Piece(%d) = %q, %v; want the added token <sep>", sep, p, ok)
		}
		if id, ok := tk.ID("<sep>"); !ok || id != sep {
			t.Fatalf("ID(<sep>) = %d, %v", id, ok)
		}
		return tk
	}
	runCases(t, mk(nil), []encCase{
		{"a <sep> b", []int{4, 3, sep, 3, 6}, "segments 'a ' -> ▁a▁ -> ▁a | ▁, then <sep>, then ' b' -> ▁b = [▁][b]"},
	})
	runCases(t, mk(map[string]any{"lstrip": true, "rstrip": true}), []encCase{
		{"a <sep> b", []int{4, sep, 3, 6}, "the spaces around <sep> belong to it: 'a' -> ▁a, 'b' -> ▁b"},
	})
	runCases(t, mk(map[string]any{"single_word": true}), []encCase{
		{"x<sep>y", []int{9, 2, 10}, "inside a word <sep> is not split out: ▁x, the five unknown characters " +
			"fused into one <unk>, y"},
		{"x <sep> y", []int{9, 3, sep, 3, 10}, "between spaces it is: 'x ' -> ▁x | ▁; ' y' -> ▁y = [▁][y]"},
	})
}
