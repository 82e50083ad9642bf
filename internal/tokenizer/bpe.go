package tokenizer

import (
	"math/bits"
)

// mergeTable maps a pair of token ids to (rank, merged id) with open
// addressing: a flat array is cheaper to build and probe than a Go map for the
// 151k Qwen merges, and needs nothing but the merge list to rebuild.
type mergeTable struct {
	keys  []uint64 // a<<32 | b, or emptyKey
	vals  []uint64 // rank<<32 | merged id
	shift uint
}

const emptyKey = ^uint64(0)

func newMergeTable(n int) *mergeTable {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	t := &mergeTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for i := range t.keys {
		t.keys[i] = emptyKey
	}
	return t
}

func (t *mergeTable) slot(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

// put sets the pair's value; a repeated pair keeps the last rank, as HF's
// HashMap collect does.
func (t *mergeTable) put(a, b int32, rank uint32, merged int32) {
	key := uint64(uint32(a))<<32 | uint64(uint32(b))
	mask := len(t.keys) - 1
	for i := t.slot(key); ; i = (i + 1) & mask {
		if t.keys[i] == emptyKey || t.keys[i] == key {
			t.keys[i] = key
			t.vals[i] = uint64(rank)<<32 | uint64(uint32(merged))
			return
		}
	}
}

func (t *mergeTable) get(a, b int32) (rank uint32, merged int32, ok bool) {
	key := uint64(uint32(a))<<32 | uint64(uint32(b))
	mask := len(t.keys) - 1
	for i := t.slot(key); ; i = (i + 1) & mask {
		k := t.keys[i]
		if k == key {
			v := t.vals[i]
			return uint32(v >> 32), int32(uint32(v)), true
		}
		if k == emptyKey {
			return 0, 0, false
		}
	}
}

// bpeScratch holds the per-call buffers of bpe, reused through a sync.Pool.
type bpeScratch struct {
	id, prev, next []int32
	dead           []bool
	heap           []uint64
}

// bpe appends the ids of one pre-tokenized piece (raw bytes; the byte-level
// mapping is folded into byteID). It follows HF's BPE::merge_word/merge_all:
// repeatedly merge the adjacent pair of lowest rank, the leftmost on ties,
// using a min-heap of rank<<32|position with lazy deletion. An entry is stale
// when its pair no longer has that rank; since ranks are unique per pair,
// that is HF's new-id check.
func (tk *Tokenizer) bpe(piece string, out []int, sc *bpeScratch) []int {
	n := len(piece)
	if n == 0 {
		return out
	}
	if n == 1 {
		return append(out, int(tk.byteID[piece[0]]))
	}
	if tk.wholeWord != nil {
		if id, ok := tk.wholeWord[piece]; ok {
			return append(out, int(id))
		}
	}
	sc.id = grow32(sc.id, n)
	sc.prev = grow32(sc.prev, n)
	sc.next = grow32(sc.next, n)
	if cap(sc.dead) < n {
		sc.dead = make([]bool, n)
	}
	id, prev, next, dead := sc.id[:n], sc.prev[:n], sc.next[:n], sc.dead[:n]
	h := sc.heap[:0]
	for i := 0; i < n; i++ {
		id[i] = tk.byteID[piece[i]]
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
		dead[i] = false
	}
	next[n-1] = -1
	for i := 0; i+1 < n; i++ {
		if rank, _, ok := tk.merges.get(id[i], id[i+1]); ok {
			h = heapPush(h, uint64(rank)<<32|uint64(i))
		}
	}
	for len(h) > 0 {
		var top uint64
		top, h = heapPop(h)
		rank, pos := uint32(top>>32), int32(uint32(top))
		if dead[pos] || next[pos] < 0 {
			continue
		}
		right := next[pos]
		r, merged, ok := tk.merges.get(id[pos], id[right])
		if !ok || r != rank {
			continue
		}
		id[pos] = merged
		dead[right] = true
		next[pos] = next[right]
		if nr := next[right]; nr >= 0 {
			prev[nr] = pos
		}
		if p := prev[pos]; p >= 0 {
			if rk, _, ok := tk.merges.get(id[p], id[pos]); ok {
				h = heapPush(h, uint64(rk)<<32|uint64(p))
			}
		}
		if nx := next[pos]; nx >= 0 {
			if rk, _, ok := tk.merges.get(id[pos], id[nx]); ok {
				h = heapPush(h, uint64(rk)<<32|uint64(pos))
			}
		}
	}
	sc.heap = h
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, int(id[i]))
	}
	return out
}

func grow32(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	return b
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	n := len(h)
	if n == 0 {
		return top, h
	}
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		if r := l + 1; r < n && h[r] < h[l] {
			l = r
		}
		if last <= h[l] {
			break
		}
		h[i] = h[l]
		i = l
	}
	h[i] = last
	return top, h
}
