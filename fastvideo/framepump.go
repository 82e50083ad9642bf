package fastvideo

import (
	"sync"
	"sync/atomic"

	"fastvideo/internal/media"
)

// pumpBytes bounds the frames queued between the decoders and the encoder (at 832x480 about 210
// frames, more than a whole 124-frame clip).
const pumpBytes = 256 << 20

// framePump feeds the H.264 encoder from a goroutine of its own. libx264 takes frames through a
// 64 KiB pipe as its threads free up, so writing from the decode stage made every decoder wait on the
// encoder; queued, the decoders run at their own pace and the encoder drains the queue beside them.
type framePump struct {
	w     *media.MP4Writer
	queue chan []byte
	done  chan struct{}
	stop  atomic.Bool // drop what is queued (the run failed)

	mu  sync.Mutex
	err error // the first write error
}

func newFramePump(w *media.MP4Writer, frameBytes int) *framePump {
	p := &framePump{w: w, queue: make(chan []byte, max(4, pumpBytes/max(frameBytes, 1))), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *framePump) run() {
	defer close(p.done)
	for frame := range p.queue {
		if p.stop.Load() || p.failed() != nil {
			continue
		}
		if err := p.w.WriteFrame(frame); err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
		}
	}
}

func (p *framePump) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// put queues a copy of frame (the caller may reuse it), or returns the encoder's error.
func (p *framePump) put(frame []byte) error {
	if err := p.failed(); err != nil {
		return err
	}
	p.queue <- append([]byte(nil), frame...)
	return nil
}

// finish waits until every queued frame is written (or, after abandon, dropped) and returns the
// first write error. Call it once.
func (p *framePump) finish() error {
	close(p.queue)
	<-p.done
	return p.failed()
}

// abandon drops the queued frames and waits for the write in progress.
func (p *framePump) abandon() {
	p.stop.Store(true)
	_ = p.finish()
}
