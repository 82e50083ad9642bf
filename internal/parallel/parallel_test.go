package parallel

import (
	"sync"
	"testing"
)

// Every index is visited once, in ranges no shorter than asked (but for a short n, done in one call).
func TestRanges(t *testing.T) {
	for _, c := range []struct{ n, min int }{{0, 4}, {3, 4}, {10, 1}, {1000, 7}, {1 << 20, 1 << 16}} {
		seen := make([]int, c.n)
		var mu sync.Mutex
		calls := 0
		Ranges(c.n, c.min, func(lo, hi int) {
			mu.Lock()
			calls++
			mu.Unlock()
			if hi-lo < c.min && !(lo == 0 && hi == c.n) {
				t.Errorf("n=%d: range [%d, %d) shorter than %d", c.n, lo, hi, c.min)
			}
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, s := range seen {
			if s != 1 {
				t.Fatalf("n=%d: index %d visited %d times", c.n, i, s)
			}
		}
		if c.n < c.min && calls != 1 {
			t.Errorf("n=%d: %d calls, want one", c.n, calls)
		}
	}
}
