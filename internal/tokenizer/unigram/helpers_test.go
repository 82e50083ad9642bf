package unigram

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"sort"
	"testing"
)

// buildCharsmap serializes rules (UTF-8 key -> replacement) in SentencePiece's
// precompiled-charsmap format: uint32 trie size, a darts-clone double array,
// then the NUL-terminated replacements. rootBase > 0 forces the root's children
// block there (a multiple of 256 >= 1<<21 exercises the extended offset
// encoding).
func buildCharsmap(t testing.TB, rules map[string]string, rootBase int) []byte {
	t.Helper()
	keys := slices.Sorted(maps.Keys(rules))
	var blob []byte
	value := map[string]uint32{}
	for _, k := range keys {
		value[k] = uint32(len(blob))
		blob = append(append(blob, rules[k]...), 0)
	}

	type node struct {
		children map[byte]*node
		terminal bool
		value    uint32
		pos      int
	}
	root := &node{children: map[byte]*node{}}
	for _, k := range keys {
		n := root
		for i := 0; i < len(k); i++ {
			c := n.children[k[i]]
			if c == nil {
				c = &node{children: map[byte]*node{}}
				n.children[k[i]] = c
			}
			n = c
		}
		n.terminal, n.value = true, value[k]
	}

	var units []uint32
	used := map[int]bool{0: true}
	usedBase := map[int]bool{}
	grow := func(p int) {
		for len(units) <= p {
			units = append(units, 0)
		}
	}
	setOffset := func(p, off int) {
		if off >= 1<<29 {
			t.Fatalf("offset %d too large", off)
		}
		grow(p)
		u := units[p] & (1<<31 | 1<<8 | 0xFF)
		if off < 1<<21 {
			u |= uint32(off) << 10
		} else {
			if off%256 != 0 {
				t.Fatalf("extended offset %d is not a multiple of 256", off)
			}
			u |= uint32(off)<<2 | 1<<9
		}
		units[p] = u
	}
	searchFrom := 1
	if rootBase > 0 {
		searchFrom = rootBase + 256
	}
	queue := []*node{root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		var labels []int
		for c := range n.children {
			labels = append(labels, int(c))
		}
		sort.Ints(labels)
		need := labels
		if n.terminal {
			need = append([]int{0}, labels...)
		}
		if len(need) == 0 {
			continue
		}
		free := func(b int) bool {
			if usedBase[b] {
				return false
			}
			for _, c := range need {
				if used[b^c] {
					return false
				}
			}
			return true
		}
		b := searchFrom
		if n == root && rootBase > 0 {
			b = rootBase
		} else {
			for !free(b) {
				b++
			}
		}
		usedBase[b] = true
		setOffset(n.pos, n.pos^b)
		if n.terminal {
			grow(b)
			units[n.pos] |= 1 << 8
			units[b] = n.value | 1<<31
			used[b] = true
		}
		for _, c := range labels {
			child := n.children[byte(c)]
			child.pos = b ^ c
			grow(child.pos)
			used[child.pos] = true
			units[child.pos] = (units[child.pos] &^ 0xFF) | uint32(c)
			queue = append(queue, child)
		}
	}
	out := make([]byte, 4, 4+4*len(units)+len(blob))
	binary.LittleEndian.PutUint32(out, uint32(4*len(units)))
	for _, u := range units {
		out = binary.LittleEndian.AppendUint32(out, u)
	}
	return append(out, blob...)
}

// testRules is a small nmt_nfkc-like map.
var testRules = map[string]string{
	"\uFF21":       "A",      // fullwidth A
	"\uFF25":       "E",      // fullwidth E
	"\uFB01":       "fi",     // ligature
	"\t":           " ",      // tab
	"\n":           " ",      // newline
	"\u200B":       "",       // zero-width space: removed
	"e\u0301":      "\u00E9", // e + combining acute -> é
	"\u3000":       " ",      // ideographic space
	"\uFF21\uFF21": "AA!",    // a two-character key, to see longest vs shortest match
}

// ---- protobuf writer for spiece.model tests ----

func pbVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func pbKey(b []byte, num, wire int) []byte { return pbVarint(b, uint64(num)<<3|uint64(wire)) }

func pbBytes(b []byte, num int, data []byte) []byte {
	return append(pbVarint(pbKey(b, num, 2), uint64(len(data))), data...)
}

func pbUint(b []byte, num int, v uint64) []byte { return pbVarint(pbKey(b, num, 0), v) }

func pbFloat(b []byte, num int, f float32) []byte {
	return binary.LittleEndian.AppendUint32(pbKey(b, num, 5), math.Float32bits(f))
}

type spPiece struct {
	piece string
	score float32
	typ   pieceType
}

type spSpec struct {
	pieces       []spPiece
	byteFallback bool
	eosID, padID int
	charsmap     []byte
	dummyPrefix  bool
	removeExtra  bool
	escape       bool
}

// serialize writes a ModelProto with a few fields the reader must skip.
func (s spSpec) serialize() []byte {
	var out []byte
	for _, p := range s.pieces {
		var m []byte
		m = pbBytes(m, 1, []byte(p.piece))
		m = pbFloat(m, 2, p.score)
		if p.typ != typeNormal { // NORMAL is the default and usually omitted
			m = pbUint(m, 3, uint64(p.typ))
		}
		out = pbBytes(out, 1, m)
	}
	var tr []byte
	tr = pbBytes(tr, 2, []byte("spiece"))                      // model_prefix (skipped)
	tr = pbUint(tr, 3, 1)                                      // model_type UNIGRAM
	tr = pbUint(tr, 4, uint64(len(s.pieces)))                  // vocab_size (skipped)
	tr = pbFloat(tr, 10, 0.9995)                               // character_coverage (fixed32, skipped)
	tr = binary.LittleEndian.AppendUint64(pbKey(tr, 11, 1), 7) // a fixed64 field (skipped)
	if s.byteFallback {
		tr = pbUint(tr, 35, 1)
	}
	tr = pbUint(tr, 40, 2) // unk_id (SentencePiece uses the UNKNOWN piece instead)
	tr = pbUint(tr, 42, uint64(int64(s.eosID)))
	tr = pbUint(tr, 43, uint64(int64(s.padID)))
	out = pbBytes(out, 2, tr)
	var ns []byte
	ns = pbBytes(ns, 1, []byte("nmt_nfkc_test"))
	if s.charsmap != nil {
		ns = pbBytes(ns, 2, s.charsmap)
	}
	b := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	ns = pbUint(ns, 3, b(s.dummyPrefix))
	ns = pbUint(ns, 4, b(s.removeExtra))
	ns = pbUint(ns, 5, b(s.escape))
	out = pbBytes(out, 3, ns)
	out = pbBytes(out, 4, pbBytes(nil, 1, pbBytes(nil, 1, []byte("self test")))) // self_test_data (skipped)
	return out
}

// ---- tokenizer.json writer ----

type hfSpec struct {
	vocab        [][2]any
	unkID        any // int or nil
	byteFallback bool
	normalizer   any
	preTokenizer any
	post         any
	added        []map[string]any
}

func (h hfSpec) json(t testing.TB) []byte {
	t.Helper()
	m := map[string]any{
		"version":        "1.0",
		"added_tokens":   h.added,
		"normalizer":     h.normalizer,
		"pre_tokenizer":  h.preTokenizer,
		"post_processor": h.post,
		"decoder":        map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
		"model":          map[string]any{"type": "Unigram", "unk_id": h.unkID, "vocab": h.vocab, "byte_fallback": h.byteFallback},
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func special(id int, content string) map[string]any {
	return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
}

func precompiledJSON(cm []byte) map[string]any {
	return map[string]any{"type": "Precompiled", "precompiled_charsmap": base64.StdEncoding.EncodeToString(cm)}
}

// t5Pipeline is the T5 tokenizer.json layout: [Precompiled,] Replace(" {2,}" ->
// " "), WhitespaceSplit + Metaspace(always), template "$A </s>".
func t5Pipeline(h hfSpec, cm []byte) hfSpec {
	norms := []any{}
	if cm != nil {
		norms = append(norms, precompiledJSON(cm))
	}
	norms = append(norms, map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " {2,}"}, "content": " "})
	h.normalizer = map[string]any{"type": "Sequence", "normalizers": norms}
	h.preTokenizer = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "WhitespaceSplit"},
		map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
	}}
	h.post = map[string]any{
		"type":   "TemplateProcessing",
		"single": []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}},
		"pair": []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}},
		"special_tokens": map[string]any{"</s>": map[string]any{"id": "</s>", "ids": []int{1}, "tokens": []string{"</s>"}}},
	}
	h.added = []map[string]any{special(0, "<pad>"), special(1, "</s>"), special(2, "<unk>")}
	return h
}
