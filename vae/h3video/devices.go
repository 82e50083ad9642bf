package h3video

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/weights"
)

// Clip-parallel decode (docs/architecture.md, "Tensor parallelism"): the clips of a decode are
// independent device work (each reads its own latent frames), and only the host's blending of a clip
// over the previous one's tail is sequential. So each device holds a replica of the weights and runs
// a lane: clip i goes to lane i mod N (clipAssignment), the lane decodes and stitches its
// clips in order, and the finished clips re-enter the frame stream in clip order
// (clipOrder). One lane is the one-device decode.

// replica is one device's copy of the decoder's weights and of its RoPE tables per tile geometry.
// Device 0's weights are the parameter set's own; another device's are copies made at load and freed
// at Close.
type replica struct {
	dev     compute.DeviceNum
	weights []*tensors.Tensor // in replicaParams order
	owned   []*tensors.Tensor // the copies this replica made
	ropes   map[[3]int][2]*tensors.Tensor
	blocks  int
}

// replicaParams lists the parameters a decode reads, in the order the graphs take them:
// post_quant_conv, proj_in and the register tokens, every block's tensors, then norm_out and
// proj_out.
func (d *Decoder) replicaParams() []*weights.Param {
	ps := []*weights.Param{d.pqW, d.pqB, d.piW, d.piB, d.registers}
	for i := range d.blocks {
		ps = append(ps, d.blocks[i][:]...)
	}
	return append(ps, d.noW, d.noB, d.poW, d.poB)
}

const preParams, postParams = 5, 4

func (r *replica) pre() []*tensors.Tensor { return r.weights[:preParams] }
func (r *replica) block(i int) []*tensors.Tensor {
	return r.weights[preParams+i*numBlockTensors : preParams+(i+1)*numBlockTensors]
}
func (r *replica) post() []*tensors.Tensor { return r.weights[len(r.weights)-postParams:] }

// newReplica places the weights on device dev: device 0 uses the bound parameters, any other device
// gets its own copies.
func (d *Decoder) newReplica(dev compute.DeviceNum) (*replica, error) {
	r := &replica{dev: dev, ropes: map[[3]int][2]*tensors.Tensor{}, blocks: len(d.blocks)}
	for _, p := range d.replicaParams() {
		r.weights = append(r.weights, p.T)
	}
	if dev == 0 {
		return r, nil
	}
	copies, err := graphexec.CopyAllToDevice(d.backend, r.weights, dev)
	if err != nil {
		return nil, fmt.Errorf("h3video: copying the weights to device %d: %w", dev, err)
	}
	r.weights, r.owned = copies, copies
	return r, nil
}

func (r *replica) release() {
	for _, t := range r.ropes {
		graphexec.Finalize(t[:]...)
	}
	clear(r.ropes)
	graphexec.Finalize(r.owned...)
	r.owned = nil
}

// placeReplicas makes one replica per device of Options.Devices (device 0 alone by default).
func (d *Decoder) placeReplicas() error {
	for dev := range max(d.opts.Devices, 1) {
		r, err := d.newReplica(compute.DeviceNum(dev))
		if err != nil {
			d.releaseReplicas()
			return err
		}
		d.replicas = append(d.replicas, r)
	}
	return nil
}

func (d *Decoder) releaseReplicas() {
	for _, r := range d.replicas {
		r.release()
	}
	d.replicas = nil
}

// Devices is how many devices the clips of a decode are spread over.
func (d *Decoder) Devices() int { return len(d.replicas) }

// finishedClip is a clip a lane decoded and stitched, or the error that stopped the lane.
type finishedClip struct {
	index  int
	canvas []float32
	lane   *lane
	err    error
}

// lane decodes its clips on one replica: a device goroutine runs the batches ahead
// (decodeOnDevice) while the lane stitches them on the host into canvases from its own pool, which
// the stream hands back once a clip is emitted.
type lane struct {
	rep   *replica
	clips []int
	st    *clipStitcher
	free  chan []float32
}

// decodeClips decodes every clip of cp over the replicas and emits them, in clip order, through a.
func (d *Decoder) decodeClips(ctx context.Context, lat latentView, chunks int, cp *clipPlan, a *clipAssembler) error {
	assign, err := clipAssignment(chunks, len(d.replicas))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var lanes sync.WaitGroup
	defer lanes.Wait()
	defer cancel()
	finished := make(chan finishedClip, len(d.replicas))
	// One lane keeps one canvas (the decode's host memory as before); more lanes keep two each, so
	// a lane stitches its next clip while the stream still waits for an earlier one.
	pool := min(len(d.replicas), 2)
	for r, rep := range d.replicas {
		l := &lane{rep: rep, clips: assign[r], free: make(chan []float32, pool)}
		for range pool {
			l.free <- make([]float32, cp.planes*cp.hh*cp.ww)
		}
		l.st = newClipStitcher(d.backend, rep.dev, cp, nil)
		lanes.Add(1)
		go func() {
			defer lanes.Done()
			d.runLane(ctx, l, lat, cp, r, finished)
		}()
	}
	order := newClipOrder[finishedClip](chunks)
	for emitted := 0; emitted < chunks; {
		var c finishedClip
		select {
		case c = <-finished:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.err != nil {
			return c.err
		}
		ready, err := order.Put(c.index, c)
		if err != nil {
			return err
		}
		for _, f := range ready {
			if err := ctx.Err(); err != nil {
				return err
			}
			err := a.emitClip(f.canvas)
			f.lane.free <- f.canvas
			if err != nil {
				return err
			}
			emitted++
		}
	}
	if err := order.Done(); err != nil {
		return err
	}
	return a.finish()
}

// runLane decodes and stitches the lane's clips in order and hands each to finished; it stops at the
// first error (which it hands on) or when ctx ends.
func (d *Decoder) runLane(ctx context.Context, l *lane, lat latentView, cp *clipPlan, index int, finished chan<- finishedClip) {
	results, stop := d.decodeOnDevice(ctx, l.rep, lat, l.clips, cp)
	defer stop()
	for _, k := range l.clips {
		var canvas []float32
		select {
		case canvas = <-l.free:
		case <-ctx.Done():
			return
		}
		l.st.canvas = canvas
		err := l.st.collect(ctx, results)
		if err == nil && d.clipHook != nil {
			d.clipHook(index, k)
		}
		select {
		case finished <- finishedClip{index: k, canvas: canvas, lane: l, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// collect receives one clip's batches and stitches them into the canvas.
func (s *clipStitcher) collect(ctx context.Context, results <-chan batchOut) error {
	s.reset()
	defer s.wait()
	for bi := range s.cp.batches {
		r, ok := <-results
		if !ok {
			s.wait()
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("h3video: internal error: device goroutine stopped early")
		}
		if r.err != nil {
			return r.err
		}
		err := s.add(bi, r.pix)
		graphexec.Finalize(r.pix)
		if err != nil {
			return fmt.Errorf("h3video: copying decoded tiles from the device: %w", err)
		}
	}
	return nil
}
