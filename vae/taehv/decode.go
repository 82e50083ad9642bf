package taehv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/media"
	"fastvideo/internal/modelkit"
)

// unitPixels is the decoder's output space: pixels already in [0, 1].
type unitPixels struct{}

// ToUnit is the identity (upstream clamps to [0, 1] in the graph).
func (unitPixels) ToUnit(_ int, v float32) float32 { return v }

// Frames is a run of consecutive decoded frames in [0, 1], handed to the Decode callback in video
// order; Sample is [3][Count][Height][Width].
type Frames = modelkit.Frames[unitPixels]

// Quantize converts a [0, 1] pixel to uint8 as FastVideo's pipelines do; see media.Quantize.
func Quantize(x float32) uint8 { return media.Quantize(x) }

// Decode decodes raw DiT latents [1, C, T, h, w] (or [C, T, h, w]) and hands emit the frames in
// order, Options.ChunkLatents latent frames at a time (all at once by default). The frames are
// upstream's decode_video output. ctx is checked between chunks; an error from emit stops the decode
// and is returned. emit runs on a goroutine of the decode's own, one call at a time in video order,
// while the device decodes the next run.
func (d *Decoder) Decode(ctx context.Context, latents []float32, shape []int, emit func(Frames) error) error {
	return d.decodeRun(ctx, latents, shape, false, readFloat(emit), emit)
}

// readFrames hands a run's device output to its consumer (which owns it).
type readFrames func(start, count, hh, ww int, out *tensors.Tensor) error

// readFloat reads [3, n, H, W] pixels into Frames for emit.
func readFloat(emit func(Frames) error) readFrames {
	return func(start, count, hh, ww int, out *tensors.Tensor) error {
		pix, err := graphexec.TakeF32(out)
		if err != nil {
			return fmt.Errorf("taehv: reading the decoded frames: %w", err)
		}
		return emit(Frames{Start: start, Count: count, Height: hh, Width: ww, Sample: pix})
	}
}

// decodeRun streams latents through the decoder a run at a time (Options.ChunkLatents, else
// pipelineChunk's), each run's frames to read, and the zero frames of H3's padding (Stream.Finish)
// to finish. read runs on a goroutine of its own, in order, so that a run's frames cross to the host
// while the device decodes the next run: on an H200 the copy of a whole video's frames takes about as
// long as decoding them.
func (d *Decoder) decodeRun(ctx context.Context, latents []float32, shape []int, rgb bool, read readFrames, finish func(Frames) error) error {
	t, h, w, err := d.cfg.LatentDims(shape)
	if err != nil {
		return err
	}
	if len(latents) != d.cfg.LatentChannels*t*h*w {
		return fmt.Errorf("taehv: %d latent values for shape %v", len(latents), shape)
	}
	s := d.NewStream(t)
	defer s.Close()
	s.rgb = rgb
	chunk := d.opts.ChunkLatents
	if chunk == 0 {
		valueBytes := 4
		if rgb {
			valueBytes = 1
		}
		chunk = d.cfg.pipelineChunk(t, 3*h*w*d.cfg.SpatialRatio()*d.cfg.SpatialRatio()*valueBytes)
	}
	type run struct {
		start, count, hh, ww int
		out                  *tensors.Tensor
	}
	runs := make(chan run, 1) // a run decoded ahead while the one before is read
	var readErr error
	var failed atomic.Bool // readErr is set: stop decoding
	var readDone sync.WaitGroup
	readDone.Go(func() {
		for r := range runs {
			if readErr != nil {
				r.out.FinalizeAll()
				continue
			}
			if readErr = read(r.start, r.count, r.hh, r.ww, r.out); readErr != nil {
				failed.Store(true)
			}
		}
	})
	enqueue := func(start, count, hh, ww int, out *tensors.Tensor) error {
		runs <- run{start, count, hh, ww, out}
		return nil
	}
	for t0 := 0; t0 < t && err == nil && !failed.Load(); t0 += chunk {
		n := min(chunk, t-t0)
		part, pshape := sliceLatents(latents, shape, t0, n)
		err = s.push(ctx, part, pshape, enqueue)
	}
	close(runs)
	readDone.Wait()
	if err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	return s.Finish(finish)
}

// DecodeToPixels decodes the whole video [1, 3, frames, H, W] in [0, 1] at once; the shape is returned
// with it.
func (d *Decoder) DecodeToPixels(ctx context.Context, latents []float32, shape []int) ([]float32, []int, error) {
	return modelkit.DecodeToPixels(ctx, latents, shape, d.cfg.OutputShape, d.Decode)
}

// sliceLatents copies latent frames [t0, t0+n) of latents [(1,) C, T, h, w] into [C, n, h, w].
func sliceLatents(latents []float32, shape []int, t0, n int) ([]float32, []int) {
	s := shape[len(shape)-4:]
	c, t, plane := s[0], s[1], s[2]*s[3]
	if t0 == 0 && n == t {
		return latents, []int{c, t, s[2], s[3]}
	}
	out := make([]float32, 0, c*n*plane)
	for ch := 0; ch < c; ch++ {
		out = append(out, latents[(ch*t+t0)*plane:(ch*t+t0+n)*plane]...)
	}
	return out, []int{c, n, s[2], s[3]}
}

// Stream decodes latents a run at a time, carrying each MemBlock's last input frame across runs, so
// that the frames equal a one-shot decode of all the runs together: live previews and memory-bounded
// decodes. Make one with Decoder.NewStream and use it from one goroutine; it holds the decoder's lock
// only while a Push runs, and its carried memories (nine frames, one per MemBlock) until Close.
type Stream struct {
	d     *Decoder
	total int // latent frames announced (0: open-ended)
	seen  int // latent frames pushed
	h, w  int
	raw   int          // raw decoder frames produced
	out   int          // frames emitted
	limit int          // frames upstream keeps for total (-1: open-ended)
	picks map[int]bool // DecodeFrames: the only output frames produced (nil: all)
	rgb   bool         // DecodeRGB24: the graph outputs interleaved 8-bit RGB
	mem   []*tensors.Tensor
	taps  func(layer int, shape []int, vals []float32) // tests: activations of each Push
}

// NewStream starts a stream. total is the number of latent frames that will be pushed, which H3's
// trimming needs for its end (upstream pads the raw frames to a multiple of 20 and drops the last 12);
// 0 leaves the stream open-ended: every frame is emitted as soon as its trim rule allows, which for H3
// matches the one-shot decode when the latent count is 5k+2 (every count H3 generates) and otherwise
// omits the end adjustment. Wan trimming does not depend on total.
func (d *Decoder) NewStream(total int) *Stream {
	s := &Stream{d: d, total: total, limit: -1}
	if total > 0 {
		s.limit = d.cfg.NumFrames(total)
	}
	return s
}

// Close frees the carried memories.
func (s *Stream) Close() {
	graphexec.Finalize(s.mem...)
	s.mem = nil
}

// Push decodes the next run of latents [1, C, t, h, w] (or [C, t, h, w]) and hands emit the frames
// that run completes.
func (s *Stream) Push(ctx context.Context, latents []float32, shape []int, emit func(Frames) error) error {
	if s.rgb {
		return errors.New("taehv: Push on an RGB24 stream")
	}
	return s.push(ctx, latents, shape, readFloat(emit))
}

// push runs the next latents through the decoder and hands read the device output of the frames
// they complete (read owns it), if any.
func (s *Stream) push(ctx context.Context, latents []float32, shape []int, read readFrames) error {
	t, h, w, err := s.d.cfg.LatentDims(shape)
	if err != nil {
		return err
	}
	if len(latents) != s.d.cfg.LatentChannels*t*h*w {
		return fmt.Errorf("taehv: %d latent values for shape %v", len(latents), shape)
	}
	if s.seen > 0 && (h != s.h || w != s.w) {
		return fmt.Errorf("taehv: latents %v: the stream's earlier latents were %d×%d", shape, s.h, s.w)
	}
	if s.total > 0 && s.seen+t > s.total {
		return fmt.Errorf("taehv: %d latent frames pushed, more than the %d announced to NewStream", s.seen+t, s.total)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := s.d.guard.Lock("taehv: Decode called after Close")
	if err != nil {
		return err
	}
	defer unlock()
	n := t * s.d.cfg.TimeUpscale()
	keep, produced := s.keptFrames(n)
	out, err := s.run(latents, t, h, w, keep)
	if err != nil {
		return err
	}
	s.seen, s.h, s.w, s.raw = s.seen+t, h, w, s.raw+n
	start := s.out
	s.out += produced
	if len(keep) == 0 {
		out.FinalizeAll()
		return nil
	}
	r := s.d.cfg.SpatialRatio()
	return read(start, len(keep), h*r, w*r, out)
}

// keptFrames lists which of the next n raw frames the stream outputs, in this run's numbering: the
// ones upstream keeps, of those only the picked ones (DecodeFrames). produced counts the kept ones.
func (s *Stream) keptFrames(n int) (keep []int, produced int) {
	keep = []int{}
	for i := range n {
		if !s.d.cfg.keepRaw(s.raw+i) || (s.limit >= 0 && s.out+produced >= s.limit) {
			continue
		}
		if s.picks == nil || s.picks[s.out+produced] {
			keep = append(keep, i)
		}
		produced++
	}
	return keep, produced
}

// run executes the chunk graph and keeps the new memories; it returns the device output of the kept
// raw frames (with none kept, of every frame), [3, len(keep), H, W] or, on an RGB24 stream,
// [len(keep), H, W, 3] bytes.
func (s *Stream) run(latents []float32, t, h, w int, keep []int) (*tensors.Tensor, error) {
	d := s.d
	pick := keep
	if len(keep) == 0 || len(keep) == t*d.cfg.TimeUpscale() {
		pick = nil
	}
	key := execKey{t: t, h: h, w: w, first: s.mem == nil, taps: s.taps != nil, keep: framesKey(pick), rgb: s.rgb}
	exec, err := d.exec(key)
	if err != nil {
		return nil, err
	}
	z := tensors.FromFlatDataAndDimensions(latents, d.cfg.LatentChannels, t, h, w)
	args := graphexec.ParamArgs(graphexec.Args([]any{z}, s.mem...), d.params...)
	outs, err := graphexec.Call(exec, args...)
	z.FinalizeAll()
	if err != nil {
		return nil, fmt.Errorf("taehv: decoding %d latent frames from frame %d: %w", t, s.seen, err)
	}
	graphexec.Finalize(s.mem...)
	s.mem = outs[1 : 1+len(memLayers)]
	if key.taps {
		err = s.readTaps(outs[1+len(memLayers):])
	} else {
		graphexec.Finalize(outs[1+len(memLayers):]...)
	}
	if err != nil {
		outs[0].FinalizeAll()
		return nil, fmt.Errorf("taehv: reading the activations: %w", err)
	}
	return outs[0], nil
}

// readTaps hands the activations of a taps graph to the test hook.
func (s *Stream) readTaps(outs []*tensors.Tensor) error {
	defer graphexec.Finalize(outs...)
	for i, l := range tapLayers {
		v, err := tensors.CopyFlatData[float32](outs[i])
		if err != nil {
			return err
		}
		s.taps(l, outs[i].Shape().Dimensions, v)
	}
	return nil
}

// Finish completes a stream made with a total: it checks that every announced latent was pushed
// and, for H3, emits the zero frames upstream's padding leaves among the frames it keeps (none for
// 5k+2 latents). An open-ended stream has nothing to finish.
func (s *Stream) Finish(emit func(Frames) error) error {
	if s.total <= 0 {
		return nil
	}
	if s.seen != s.total {
		return fmt.Errorf("taehv: %d latent frames pushed, %d announced to NewStream", s.seen, s.total)
	}
	missing := s.limit - s.out
	if missing <= 0 {
		return nil
	}
	count := missing
	if s.picks != nil {
		count = 0
		for o := s.out; o < s.limit; o++ {
			if s.picks[o] {
				count++
			}
		}
	}
	r := s.d.cfg.SpatialRatio()
	f := Frames{Start: s.out, Count: count, Height: s.h * r, Width: s.w * r,
		Sample: make([]float32, 3*count*s.h*r*s.w*r)} // upstream's zero padding, clamped: 0
	s.out += missing
	if count == 0 {
		return nil
	}
	return emit(f)
}

// DecodeFrames decodes latents [1, C, T, h, w] (or [C, T, h, w]) in one run and returns only the
// output frames picks (indices into the video Decode gives, each in range) as [3, len(picks), H, W]
// in the order given: a preview's few frames. Every latent still runs through the decoder (a
// frame depends on those before it), but only the picked frames leave the last layer and reach
// the host.
func (d *Decoder) DecodeFrames(ctx context.Context, latents []float32, shape []int, picks []int) ([]float32, []int, error) {
	t, h, w, err := d.cfg.LatentDims(shape)
	if err != nil {
		return nil, nil, err
	}
	frames := d.cfg.NumFrames(t)
	set := map[int]bool{}
	for _, p := range picks {
		if p < 0 || p >= frames {
			return nil, nil, fmt.Errorf("taehv: frame %d picked of a %d-frame video", p, frames)
		}
		set[p] = true
	}
	r := d.cfg.SpatialRatio()
	plane := h * r * w * r
	byFrame := map[int][]float32{} // frame -> its 3 planes
	s := d.NewStream(t)
	defer s.Close()
	s.picks = set
	next := 0 // the picked frames arrive ascending
	sorted := slices.Sorted(maps.Keys(set))
	collect := func(f Frames) error {
		for k := range f.Count {
			px := make([]float32, 3*plane)
			for c := range 3 {
				copy(px[c*plane:(c+1)*plane], f.Sample[(c*f.Count+k)*plane:(c*f.Count+k+1)*plane])
			}
			byFrame[sorted[next]] = px
			next++
		}
		return nil
	}
	if err := s.Push(ctx, latents, shape, collect); err != nil {
		return nil, nil, err
	}
	if err := s.Finish(collect); err != nil {
		return nil, nil, err
	}
	out := make([]float32, 3*len(picks)*plane)
	for i, p := range picks {
		for c := range 3 {
			copy(out[(c*len(picks)+i)*plane:(c*len(picks)+i+1)*plane], byFrame[p][c*plane:(c+1)*plane])
		}
	}
	return out, []int{1, 3, len(picks), h * r, w * r}, nil
}

// RGBFrames is a run of consecutive decoded frames as interleaved 8-bit RGB, frame after frame, each
// row-major [Height][Width][3] (ffmpeg's rgb24): Frames.RGB24 of the same frames, made on the device.
// The callback owns RGB.
type RGBFrames struct {
	Start, Count, Height, Width int
	RGB                         []byte
}

// DecodeRGB24 is Decode with the frames quantized to 8-bit RGB on the device (media.Quantize's
// rounding), what a video writer takes: a quarter of the float32 frames' bytes cross to the host and
// no host pass converts them.
func (d *Decoder) DecodeRGB24(ctx context.Context, latents []float32, shape []int, emit func(RGBFrames) error) error {
	read := func(start, count, hh, ww int, out *tensors.Tensor) error {
		rgb, err := graphexec.Take[uint8](out)
		if err != nil {
			return fmt.Errorf("taehv: reading the decoded frames: %w", err)
		}
		return emit(RGBFrames{Start: start, Count: count, Height: hh, Width: ww, RGB: rgb})
	}
	return d.decodeRun(ctx, latents, shape, true, read, func(f Frames) error {
		return emit(RGBFrames{Start: f.Start, Count: f.Count, Height: f.Height, Width: f.Width, RGB: f.RGB24(nil)})
	})
}
