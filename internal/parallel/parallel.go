// Package parallel splits host loops over the CPUs: converting, quantizing or touching tens of millions
// of values (a decoded video) one core at a time is what a host waits for between device programs.
package parallel

import (
	"runtime"
	"sync"
)

// Ranges calls fn over [0, n) cut into up to GOMAXPROCS contiguous ranges of at least minRange
// elements (one call on this goroutine when n is smaller), and returns when all have returned.
func Ranges(n, minRange int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), max(1, n/max(1, minRange)))
	if parts <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*n/parts, (p+1)*n/parts
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}
