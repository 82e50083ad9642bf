package unigram

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// pieceType is SentencePiece's ModelProto.SentencePiece.Type.
type pieceType uint8

const (
	typeNormal      pieceType = 1
	typeUnknown     pieceType = 2
	typeControl     pieceType = 3
	typeUserDefined pieceType = 4
	typeUnused      pieceType = 5
	typeByte        pieceType = 6
)

// unkPenalty is subtracted from the lowest piece score to score an unknown
// character (kUnkPenalty in SentencePiece, K_UNK_PENALTY in HF tokenizers).
const unkPenalty = 10.0

// model is a Unigram vocabulary and its Viterbi segmentation, with the rules of
// either HF tokenizers (tokenizer.json) or SentencePiece (spiece.model):
//
//	                      HF tokenizers                 SentencePiece
//	matchable pieces      every vocab entry             NORMAL, USER_DEFINED (UNUSED matched, then skipped)
//	min score (for unk)   over every entry              over NORMAL pieces
//	arithmetic            float64                       float32 (user-defined bonus in float64)
//	user-defined pieces   (added tokens instead)        score length*max_score - 0.1
//	duplicate pieces      last id wins                  rejected at load
type model struct {
	pieces []string
	scores []float64
	types  []pieceType // nil for HF: every entry is a normal piece
	ids    map[string]int
	maxLen int // longest matchable piece, bytes

	unkID        int // -1: no unknown piece (an unknown character is then an error)
	unkScore     float64
	maxScore     float64 // SentencePiece: highest NORMAL score, for the user-defined bonus
	sp           bool
	byteFallback bool
	byteIDs      [256]int // byte pieces <0xXX>, -1 where absent
}

func (m *model) matchable(id int) bool {
	if m.types == nil {
		return true
	}
	t := m.types[id]
	return t == typeNormal || t == typeUserDefined || t == typeUnused
}

// finish derives the lookup tables once pieces, scores, types, unkID, sp and
// byteFallback are set.
func (m *model) finish() error {
	if len(m.pieces) == 0 {
		return fmt.Errorf("the vocabulary is empty")
	}
	m.ids = make(map[string]int, len(m.pieces))
	minScore, maxScore := math.Inf(1), math.Inf(-1)
	if m.sp {
		// SentencePiece starts from FLT_MAX / FLT_MIN (the smallest positive float).
		minScore, maxScore = math.MaxFloat32, 0x1p-126
	}
	for id, p := range m.pieces {
		if p == "" {
			return fmt.Errorf("piece %d is empty", id)
		}
		if m.sp {
			if prev, dup := m.ids[p]; dup {
				return fmt.Errorf("piece %q is defined twice (ids %d and %d)", p, prev, id)
			}
		}
		m.ids[p] = id // HF: a later duplicate wins, as in its token_to_ids map
		if m.matchable(id) && len(p) > m.maxLen {
			m.maxLen = len(p)
		}
		if !m.sp || m.types[id] == typeNormal {
			minScore = math.Min(minScore, m.scores[id])
			maxScore = math.Max(maxScore, m.scores[id])
		}
	}
	if m.unkID >= len(m.pieces) {
		return fmt.Errorf("unk_id %d is outside the vocabulary of %d pieces", m.unkID, len(m.pieces))
	}
	m.unkScore = minScore - unkPenalty
	if m.sp {
		m.unkScore = float64(float32(minScore) - unkPenalty)
	}
	m.maxScore = maxScore
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := m.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	return nil
}

// bestNode is the best path ending at one byte position of the text.
type bestNode struct {
	score  float64
	start  int // -1: unreached
	id     int
	isUnk  bool
	length int
}

// encode appends the ids of the best segmentation of s (one pre-token) to out.
//
// The lattice is built on the fly in the order SentencePiece's EncodeOptimized
// and HF's encode_optimized use: start positions left to right, and from each
// start the matching pieces shortest first; a candidate replaces the best path
// ending at its end position only if its total score is strictly greater. Among
// paths of equal score the one found first is kept, which means the one whose
// last piece starts earliest (is longest), and so on backwards. A character no
// single-character piece covers gets an unknown node scored min_score - 10.
// Consecutive unknown nodes become one unknown token, or their bytes' <0xXX>
// pieces with byte fallback.
func (m *model) encode(s string, out []int) ([]int, error) {
	if s == "" {
		return out, nil
	}
	best, err := m.lattice(s)
	if err != nil {
		return out, err
	}
	path, err := backtrack(best, s)
	if err != nil {
		return out, err
	}
	return m.emitPath(path, s, out)
}

// lattice fills best[end], the best path ending at each byte offset, in the
// order described at encode.
func (m *model) lattice(s string) ([]bestNode, error) {
	n := len(s)
	best := make([]bestNode, n+1)
	for i := range best {
		best[i].start = -1
	}
	best[0].start = 0
	for start := 0; start < n; {
		_, mblen := utf8.DecodeRuneInString(s[start:])
		till := best[start].score
		single := false
		for end := start + 1; end <= n && end-start <= m.maxLen; end++ {
			if end < n && !utf8.RuneStart(s[end]) {
				continue
			}
			id, ok := m.ids[s[start:end]]
			if !ok || !m.matchable(id) {
				continue
			}
			cand, ok := m.pieceScore(id, end-start, till)
			if !ok {
				continue
			}
			t := &best[end]
			if t.start < 0 || cand > t.score {
				if m.sp {
					cand = float64(float32(cand))
				}
				*t = bestNode{score: cand, start: start, id: id, length: end - start}
			}
			if end-start == mblen {
				single = true
			}
		}
		if !single {
			if err := m.addUnknownNode(best, s, start, mblen, till); err != nil {
				return nil, err
			}
		}
		start += mblen
	}
	return best, nil
}

// pieceScore is the score of a path scoring till extended by piece id of
// length bytes, in SentencePiece's float32 arithmetic for spiece.model; false
// skips an unused piece (matched by the trie, then skipped: no single node).
func (m *model) pieceScore(id, length int, till float64) (float64, bool) {
	if !m.sp {
		return m.scores[id] + till, true
	}
	switch m.types[id] {
	case typeUnused:
		return 0, false
	case typeUserDefined:
		// (length * max_score_ - 0.1) is a double in SentencePiece; the
		// sum is compared as a double and stored as a float.
		return float64(float32(length)*float32(m.maxScore)) - 0.1 + till, true
	}
	return float64(float32(m.scores[id]) + float32(till)), true
}

// addUnknownNode covers the character at start (mblen bytes), which no
// single-character piece matches, with an unknown node scored min_score - 10.
func (m *model) addUnknownNode(best []bestNode, s string, start, mblen int, till float64) error {
	cand := m.unkScore + till
	if m.sp {
		cand = float64(float32(m.unkScore) + float32(till))
	}
	t := &best[start+mblen]
	if t.start < 0 || cand > t.score {
		if m.unkID < 0 {
			return fmt.Errorf("%q has no piece and the vocabulary defines no unknown token (unk_id)", s[start:start+mblen])
		}
		*t = bestNode{score: cand, start: start, id: m.unkID, isUnk: true, length: mblen}
	}
	return nil
}

// backtrack walks the best path from the end of s, last piece first.
func backtrack(best []bestNode, s string) ([]bestNode, error) {
	var path []bestNode
	for end := len(s); end > 0; {
		b := best[end]
		if b.start < 0 {
			return nil, fmt.Errorf("internal error: no segmentation reaches byte %d of %q", end, s)
		}
		path = append(path, b)
		end = b.start
	}
	return path, nil
}

// emitPath appends the ids of a backtracked path in text order, fusing each
// run of unknown nodes.
func (m *model) emitPath(path []bestNode, s string, out []int) ([]int, error) {
	pos := 0
	for k := len(path) - 1; k >= 0; {
		b := path[k]
		if !m.isUnknownNode(b) {
			out = append(out, b.id)
			pos += b.length
			k--
			continue
		}
		runStart := pos
		for k >= 0 && m.isUnknownNode(path[k]) {
			pos += path[k].length
			k--
		}
		var err error
		out, err = m.appendUnknown(s[runStart:pos], out)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// isUnknownNode: an unknown-character node, or (HF, whose trie holds every entry)
// a match of the unknown piece's own text, which HF fuses the same way.
func (m *model) isUnknownNode(b bestNode) bool {
	return b.isUnk || (m.unkID >= 0 && b.id == m.unkID)
}

func (m *model) appendUnknown(text string, out []int) ([]int, error) {
	if !m.sp {
		// HF looks the fused text up as a token first.
		if id, ok := m.ids[text]; ok {
			return append(out, id), nil
		}
	}
	if m.byteFallback {
		ok := true
		for i := 0; i < len(text); i++ {
			if m.byteIDs[text[i]] < 0 {
				ok = false
				break
			}
		}
		if ok {
			for i := 0; i < len(text); i++ {
				out = append(out, m.byteIDs[text[i]])
			}
			return out, nil
		}
	}
	if m.unkID < 0 {
		return out, fmt.Errorf("%q has no piece and the vocabulary defines no unknown token (unk_id)", text)
	}
	return append(out, m.unkID), nil
}
