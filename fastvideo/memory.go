package fastvideo

import (
	"runtime/metrics"
	"sync"
	"time"
)

// memSampler tracks the peak of the Go runtime's mapped memory, sampled at every event and every
// few milliseconds in the background (a forward allocates and frees between events).
type memSampler struct {
	mu     sync.Mutex
	sample [1]metrics.Sample
	peak   uint64
	stop   chan struct{}
	done   chan struct{}
}

const memSampleEvery = 10 * time.Millisecond

func newMemSampler() *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
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
