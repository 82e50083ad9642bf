package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// bpeNaive is the textbook form of HF's merge loop: merge the lowest-ranked
// adjacent pair, leftmost first, until none is in the merge list. It is
// quadratic, and independent of bpe's heap and lazy deletion.
func bpeNaive(tk *Tokenizer, piece string) []int {
	syms := make([]int32, len(piece))
	for i := 0; i < len(piece); i++ {
		syms[i] = tk.byteID[piece[i]]
	}
	for {
		best, bestRank := -1, uint32(0)
		var bestID int32
		for i := 0; i+1 < len(syms); i++ {
			if r, m, ok := tk.merges.get(syms[i], syms[i+1]); ok && (best < 0 || r < bestRank) {
				best, bestRank, bestID = i, r, m
			}
		}
		if best < 0 {
			break
		}
		syms[best] = bestID
		syms = slices.Delete(syms, best+1, best+2)
	}
	out := make([]int, len(syms))
	for i, s := range syms {
		out[i] = int(s)
	}
	return out
}

// FuzzEncodeDecode: Encode never panics on any bytes and returns known ids;
// Decode(Encode(x)) == x for every NFC-normalized valid UTF-8 x; the scanner
// agrees with regexp2 and the BPE with the naive loop on x's pieces.
func FuzzEncodeDecode(f *testing.F) {
	for _, name := range []string{"cases.jsonl", "hf_edge_cases.jsonl"} {
		for _, c := range readCases(f, filepath.Join(qwenDir, name)) {
			f.Add(c.Text)
		}
	}
	f.Add("\xff\xfe<|im_end|>\xe4\xb8")
	tk := loadQwen(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tk.VocabSize() {
				t.Fatalf("Encode(%q) gave id %d outside [0, %d)", s, id, tk.VocabSize())
			}
		}
		if _, err := tk.Decode(ids); err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", s, err)
		}
		if !utf8.ValidString(s) {
			if v := toValidUTF8(s); !slices.Equal(ids, tk.Encode(v)) {
				t.Fatalf("Encode(%q) differs from Encode of its repaired form %q", s, v)
			}
			return
		}
		x := norm.NFC.String(s)
		got, err := tk.Decode(tk.Encode(x))
		if err != nil || got != x {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", x, got, err)
		}
		if len(x) > 4096 {
			return // keep the references' cost bounded; long inputs still round-trip above
		}
		if ref := splitRef(t, x); !slices.Equal(splitGot(x), ref) {
			t.Fatalf("split(%q) = %q, regexp2 gives %q", x, splitGot(x), ref)
		}
		sc := new(bpeScratch)
		splitQwen(x, func(p string) {
			if len(p) > 256 {
				return // bpeNaive is cubic in the worst case
			}
			if got, want := tk.bpe(p, nil, sc), bpeNaive(tk, p); !slices.Equal(got, want) {
				t.Fatalf("bpe(%q) = %v, the naive loop gives %v", p, got, want)
			}
		})
	})
}
