package fastvideo

import (
	"runtime/metrics"
	"sync"
	"time"

	"fastvideo/fastvideo/family"
)

// memSampler tracks the peak of the Go runtime's mapped memory, sampled at every event and every
// few milliseconds in the background (a forward allocates and frees between events).
type memSampler struct {
	mu     sync.Mutex
	sample [1]metrics.Sample
	peak   uint64
	// device reads the accelerator's used memory (nil: none); devicePeak is its largest reading,
	// XLA's pool high-water mark plus the CUDA context, process-wide.
	device     func() (used, total uint64, err error)
	devicePeak uint64
	stop       chan struct{}
	done       chan struct{}
}

const memSampleEvery = 10 * time.Millisecond

func newMemSampler(device func() (used, total uint64, err error)) *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{}), device: device}
	m.sample[0].Name = "/memory/classes/total:bytes"
	m.take()
	go func() {
		defer close(m.done)
		t := time.NewTicker(memSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.take()
			}
		}
	}()
	return m
}

func (m *memSampler) take() {
	m.mu.Lock()
	defer m.mu.Unlock()
	metrics.Read(m.sample[:])
	if m.sample[0].Value.Kind() == metrics.KindUint64 {
		m.peak = max(m.peak, m.sample[0].Value.Uint64())
	}
	if m.device != nil {
		if used, _, err := m.device(); err == nil {
			m.devicePeak = max(m.devicePeak, used)
		}
	}
}

// deviceReader is what the sampler reads of the device: the XLA allocator's bytes in use where the
// binary can read them, else NVML's used memory (the pool's size); nil for none.
func deviceReader(e *family.Engine) func() (used, total uint64, err error) {
	if a := e.AllocatorMemory; a != nil {
		return func() (uint64, uint64, error) {
			inUse, err := a()
			return inUse, 0, err
		}
	}
	return e.DeviceMemory
}

// devicePeakBytes is the accelerator's peak, -1 when it was not read.
func (m *memSampler) devicePeakBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.device == nil || m.devicePeak == 0 {
		return -1
	}
	return int64(m.devicePeak)
}

// finish stops the background sampling and returns the peak.
func (m *memSampler) finish() uint64 {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.take()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}
