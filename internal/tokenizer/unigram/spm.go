package unigram

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// A SentencePiece model file (spiece.model) is a serialized ModelProto
// (sentencepiece_model.proto). Only the fields tokenization needs are read:
//
//	ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//	SentencePiece   1 piece (string), 2 score (float), 3 type (enum, default NORMAL)
//	TrainerSpec     3 model_type (UNIGRAM = 1, the default), 24 treat_whitespace_as_suffix,
//	                35 byte_fallback, 41 bos_id, 42 eos_id (default 2), 43 pad_id (default -1)
//	NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (default true),
//	                4 remove_extra_whitespaces (default true), 5 escape_whitespaces (default true)
//
// The unknown piece is the piece of type UNKNOWN (SentencePiece ignores
// trainer_spec.unk_id when encoding).

// protoField is one decoded field of a protobuf message.
type protoField struct {
	num    int
	wire   int
	varint uint64
	bytes  []byte // length-delimited payload
	fixed  uint64 // fixed32 / fixed64 payload
}

func readVarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7F) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("truncated or overlong varint")
}

// parseProto splits a message into its fields, in order.
func parseProto(b []byte) ([]protoField, error) {
	var out []protoField
	for len(b) > 0 {
		key, n, err := readVarint(b)
		if err != nil {
			return nil, err
		}
		b = b[n:]
		f := protoField{num: int(key >> 3), wire: int(key & 7)}
		if f.num == 0 {
			return nil, fmt.Errorf("field number 0")
		}
		switch f.wire {
		case 0:
			if f.varint, n, err = readVarint(b); err != nil {
				return nil, err
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return nil, fmt.Errorf("truncated fixed64 field %d", f.num)
			}
			f.fixed, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n, err := readVarint(b)
			if err != nil {
				return nil, err
			}
			b = b[n:]
			if l > uint64(len(b)) {
				return nil, fmt.Errorf("field %d declares %d bytes, %d left", f.num, l, len(b))
			}
			f.bytes, b = b[:l], b[l:]
		case 5:
			if len(b) < 4 {
				return nil, fmt.Errorf("truncated fixed32 field %d", f.num)
			}
			f.fixed, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return nil, fmt.Errorf("field %d has wire type %d (groups are not used by sentencepiece_model.proto)", f.num, f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

// spNormalizer is SentencePiece's Normalizer::Normalize.
type spNormalizer struct {
	cm                     *charsmap // nil: identity
	userDefined            []string  // matched before the charsmap and kept verbatim
	addDummyPrefix         bool
	removeExtraWhitespaces bool
	escapeWhitespaces      bool
}

const spaceSymbol = "\u2581"

func (n *spNormalizer) prefix(s string) (string, int) {
	best := 0
	for _, u := range n.userDefined {
		if len(u) > best && strings.HasPrefix(s, u) {
			best = len(u)
		}
	}
	if best > 0 {
		return s[:best], best
	}
	return n.cm.prefixSP(s)
}

// normalize applies the charsmap by longest match, drops leading whitespace,
// adds the dummy-prefix space, collapses runs of spaces, drops trailing ones and
// escapes spaces as U+2581. Only ' ' counts as whitespace here: the charsmap is
// what maps tabs, newlines and other spaces to it.
func (n *spNormalizer) normalize(input string) string {
	if n.removeExtraWhitespaces {
		for input != "" {
			p, l := n.prefix(input)
			if p != " " {
				break
			}
			input = input[l:]
		}
	}
	if input == "" {
		return ""
	}
	var b strings.Builder
	space := " "
	if n.escapeWhitespaces {
		space = spaceSymbol
	}
	if n.addDummyPrefix {
		b.WriteString(space)
	}
	prevSpace := n.removeExtraWhitespaces
	for input != "" {
		p, l := n.prefix(input)
		for prevSpace && strings.HasPrefix(p, " ") {
			p = p[1:]
		}
		if p != "" {
			if n.escapeWhitespaces {
				b.WriteString(strings.ReplaceAll(p, " ", spaceSymbol))
			} else {
				b.WriteString(p)
			}
			prevSpace = strings.HasSuffix(p, " ")
		}
		input = input[l:]
		if !n.removeExtraWhitespaces {
			prevSpace = false
		}
	}
	out := b.String()
	if n.removeExtraWhitespaces {
		for strings.HasSuffix(out, space) {
			out = out[:len(out)-len(space)]
		}
	}
	return out
}

func fromSentencePiece(data []byte, opts Options) (*Tokenizer, error) {
	fields, err := parseProto(data)
	if err != nil {
		return nil, fmt.Errorf("spiece.model is not a SentencePiece ModelProto: %v", err)
	}
	m := &model{unkID: -1, sp: true}
	spec := &spNormalizer{addDummyPrefix: true, removeExtraWhitespaces: true, escapeWhitespaces: true}
	trainer := spTrainer{modelType: 1, eosID: 2, padID: -1}
	for _, f := range fields {
		if f.wire != 2 {
			continue
		}
		switch f.num {
		case 1:
			err = m.addPiece(f.bytes, spec)
		case 2:
			err = trainer.parse(f.bytes, m)
		case 3:
			err = spec.parse(f.bytes)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := m.finishSentencePiece(trainer.modelType); err != nil {
		return nil, err
	}
	t := &Tokenizer{model: m, kind: "spiece.model", sp: spec, eosID: -1, padID: -1}
	if trainer.eosID >= 0 && trainer.eosID < len(m.pieces) {
		t.eosID = trainer.eosID
		t.suffix = []int{trainer.eosID} // T5 appends </s> to every sequence
	}
	if trainer.padID >= 0 && trainer.padID < len(m.pieces) {
		t.padID = trainer.padID
	}
	return t, nil
}

// addPiece appends one SentencePiece (field 1 of ModelProto) to the model; a
// user-defined piece is also matched whole by the normalizer spec.
func (m *model) addPiece(payload []byte, spec *spNormalizer) error {
	sub, err := parseProto(payload)
	if err != nil {
		return fmt.Errorf("spiece.model piece %d: %v", len(m.pieces), err)
	}
	piece, score, typ := "", float32(0), typeNormal
	for _, g := range sub {
		switch {
		case g.num == 1 && g.wire == 2:
			piece = string(g.bytes)
		case g.num == 2 && g.wire == 5:
			score = math.Float32frombits(uint32(g.fixed))
		case g.num == 3 && g.wire == 0:
			typ = pieceType(g.varint)
		}
	}
	if typ < typeNormal || typ > typeByte {
		return fmt.Errorf("spiece.model piece %d (%q) has unknown type %d", len(m.pieces), piece, typ)
	}
	if typ == typeUnknown {
		if m.unkID >= 0 {
			return fmt.Errorf("spiece.model defines two unknown pieces (ids %d and %d)", m.unkID, len(m.pieces))
		}
		m.unkID = len(m.pieces)
	}
	if typ == typeUserDefined {
		spec.userDefined = append(spec.userDefined, piece)
	}
	m.pieces = append(m.pieces, piece)
	m.scores = append(m.scores, float64(score))
	m.types = append(m.types, typ)
	return nil
}

// spTrainer holds what the tokenizer needs from TrainerSpec.
type spTrainer struct {
	modelType    uint64
	eosID, padID int
}

// parse reads TrainerSpec (field 2 of ModelProto); byte_fallback goes to m.
func (tr *spTrainer) parse(payload []byte, m *model) error {
	sub, err := parseProto(payload)
	if err != nil {
		return fmt.Errorf("spiece.model trainer_spec: %v", err)
	}
	for _, g := range sub {
		if g.wire != 0 {
			continue
		}
		switch g.num {
		case 3:
			tr.modelType = g.varint
		case 24:
			if g.varint != 0 {
				return fmt.Errorf("spiece.model sets treat_whitespace_as_suffix, which is not supported")
			}
		case 35:
			m.byteFallback = g.varint != 0
		case 42:
			tr.eosID = int(int32(g.varint))
		case 43:
			tr.padID = int(int32(g.varint))
		}
	}
	return nil
}

// parse reads NormalizerSpec (field 3 of ModelProto).
func (n *spNormalizer) parse(payload []byte) error {
	sub, err := parseProto(payload)
	if err != nil {
		return fmt.Errorf("spiece.model normalizer_spec: %v", err)
	}
	for _, g := range sub {
		switch {
		case g.num == 2 && g.wire == 2 && len(g.bytes) > 0:
			cm, err := parseCharsmap(g.bytes)
			if err != nil {
				return fmt.Errorf("spiece.model normalizer_spec: %v", err)
			}
			n.cm = cm
		case g.num == 3 && g.wire == 0:
			n.addDummyPrefix = g.varint != 0
		case g.num == 4 && g.wire == 0:
			n.removeExtraWhitespaces = g.varint != 0
		case g.num == 5 && g.wire == 0:
			n.escapeWhitespaces = g.varint != 0
		}
	}
	return nil
}

// finishSentencePiece checks what SentencePiece requires of a Unigram model:
// one UNKNOWN piece and, with byte_fallback, all 256 BYTE pieces.
func (m *model) finishSentencePiece(modelType uint64) error {
	if modelType != 1 {
		return fmt.Errorf("spiece.model has model_type %d; this package reads Unigram models (type 1) only", modelType)
	}
	if m.unkID < 0 {
		return fmt.Errorf("spiece.model has no piece of type UNKNOWN; SentencePiece requires one")
	}
	if err := m.finish(); err != nil {
		return fmt.Errorf("spiece.model: %v", err)
	}
	if m.byteFallback {
		for b, id := range m.byteIDs {
			if id < 0 || m.types[id] != typeByte {
				return fmt.Errorf("spiece.model enables byte_fallback but has no BYTE piece <0x%02X>; SentencePiece requires all 256", b)
			}
		}
	}
	return nil
}
