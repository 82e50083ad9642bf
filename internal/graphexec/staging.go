package graphexec

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gomlx/compute"
)

// hostPinner is what the GPU build's XLA backend adds (bench/goxla-pinned.patch): registering host
// memory for DMA. A device-to-host copy into pageable memory is staged by the CUDA driver (about
// 7.5 GB/s on the H200's host) and does not overlap with the programs running; into registered
// memory it is one DMA that does. So Take copies a large output into a registered staging region
// and from there, on every CPU, into the caller's slice.
type hostPinner interface {
	PinHostMemory(data unsafe.Pointer, size int) (unpin func() error, err error)
}

const (
	// stageMinBytes: smaller outputs copy straight into their slice, as fast either way.
	stageMinBytes = 4 << 20
	// stageRound: regions are whole multiples, so that outputs of nearby sizes share one.
	stageRound = 16 << 20
	// stageMaxBytes bounds the page-locked memory a process keeps (it is taken from the host's RAM
	// for good); an output that does not fit copies straight into its slice.
	stageMaxBytes = 1 << 30
)

// stagingRegion is one registered mapping.
type stagingRegion struct {
	mem   []byte
	unpin func() error
}

// stagingPool keeps one backend's registered regions for reuse: registering costs milliseconds.
type stagingPool struct {
	pinner hostPinner
	mu     sync.Mutex
	free   []*stagingRegion
	pinned int   // bytes registered, in use or free
	failed error // registration failed once: the plugin cannot, stop asking
}

var stagingPools sync.Map // compute.Backend -> *stagingPool

// asPinner is b's hostPinner, if it is one (tests stand a fake in for the go backend).
var asPinner = func(b compute.Backend) (hostPinner, bool) {
	p, ok := b.(hostPinner)
	return p, ok
}

// stagingOff: SetPinnedStaging(false) was called.
var stagingOff atomic.Bool

// SetPinnedStaging turns the staging of large outputs through page-locked memory on (the default,
// where the backend can) or off, for the whole process: an A/B of the copy paths.
func SetPinnedStaging(on bool) { stagingOff.Store(!on) }

// poolFor returns b's pool, or nil when b cannot register host memory or staging is off.
func poolFor(b compute.Backend) *stagingPool {
	if stagingOff.Load() {
		return nil
	}
	if p, ok := stagingPools.Load(b); ok {
		return p.(*stagingPool)
	}
	pinner, ok := asPinner(b)
	if !ok || !canMapHost {
		return nil
	}
	p, _ := stagingPools.LoadOrStore(b, &stagingPool{pinner: pinner})
	return p.(*stagingPool)
}

// get returns a free region of at least n bytes, registering a new one while the pool has room
// (dropping smaller free regions to make it), or nil.
func (p *stagingPool) get(n int) *stagingRegion {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return nil
	}
	best := -1
	for i, r := range p.free {
		if len(r.mem) >= n && (best < 0 || len(r.mem) < len(p.free[best].mem)) {
			best = i
		}
	}
	if best >= 0 {
		r := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		return r
	}
	size := (n + stageRound - 1) / stageRound * stageRound
	for len(p.free) > 0 && p.pinned+size > stageMaxBytes {
		p.release(p.free[0])
		p.free = p.free[1:]
	}
	if p.pinned+size > stageMaxBytes {
		return nil
	}
	mem, err := mapHost(size)
	if err != nil {
		return nil
	}
	unpin, err := p.pinner.PinHostMemory(unsafe.Pointer(unsafe.SliceData(mem)), size)
	if err != nil {
		p.failed = err
		_ = unmapHost(mem)
		return nil
	}
	p.pinned += size
	return &stagingRegion{mem: mem, unpin: unpin}
}

// release unregisters and unmaps r (p.mu held).
func (p *stagingPool) release(r *stagingRegion) {
	if r.unpin() == nil {
		_ = unmapHost(r.mem)
	} // else still registered: leaking the mapping is safer than unmapping memory a device may write
	p.pinned -= len(r.mem)
}

func (p *stagingPool) put(r *stagingRegion) {
	p.mu.Lock()
	p.free = append(p.free, r)
	p.mu.Unlock()
}

// takeStaged copies buf, n values of T, into a registered region and hands it to consume (which
// must not keep it); false when there is no region to use.
func takeStaged[T any](b compute.Backend, buf compute.Buffer, n int, consume func(staged []T)) (bool, error) {
	var zero T
	bytes := n * int(unsafe.Sizeof(zero))
	if bytes < stageMinBytes {
		return false, nil
	}
	p := poolFor(b)
	if p == nil {
		return false, nil
	}
	r := p.get(bytes)
	if r == nil {
		return false, nil
	}
	defer p.put(r)
	staged := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(r.mem))), n)
	if err := buf.ToFlatData(staged); err != nil {
		return true, err
	}
	consume(staged)
	return true, nil
}

// PinnedStaging reports the page-locked bytes b's pool holds, and why it stopped registering more
// (nil while it can; errNoPinning when b cannot at all).
func PinnedStaging(b compute.Backend) (bytes int, err error) {
	if stagingOff.Load() {
		return 0, errors.New("turned off (SetPinnedStaging)")
	}
	p := poolFor(b)
	if p == nil {
		return 0, errNoPinning
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pinned, p.failed
}

var errNoPinning = errors.New("this backend cannot register host memory (the plain build, or not XLA)")
