package taehv

import (
	"context"
	"fmt"

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
// and is returned.
func (d *Decoder) Decode(ctx context.Context, latents []float32, shape []int, emit func(Frames) error) error {
	t, h, w, err := d.cfg.LatentDims(shape)
	if err != nil {
		return err
	}
	if len(latents) != d.cfg.LatentChannels*t*h*w {
		return fmt.Errorf("taehv: %d latent values for shape %v", len(latents), shape)
	}
	s := d.NewStream(t)
	defer s.Close()
	chunk := d.opts.ChunkLatents
	if chunk == 0 {
		chunk = t
	}
	for t0 := 0; t0 < t; t0 += chunk {
		n := min(chunk, t-t0)
		part, pshape := sliceLatents(latents, shape, t0, n)
		if err := s.Push(ctx, part, pshape, emit); err != nil {
			return err
		}
	}
	return s.Finish(emit)
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
	raw   int // raw decoder frames produced
	out   int // frames emitted
	limit int // frames upstream keeps for total (-1: open-ended)
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
func (s *Stream) Push(ctx context.Context, latents []float32, shape []int, emit func(Frames) error) (err error) {
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
	pix, err := s.run(latents, t, h, w)
	if err != nil {
		return err
	}
	s.seen, s.h, s.w = s.seen+t, h, w
	return s.emitRaw(pix, t*s.d.cfg.TimeUpscale(), emit)
}

// run executes the chunk graph and keeps the new memories; it returns the pixels [3, t·u, H, W].
func (s *Stream) run(latents []float32, t, h, w int) ([]float32, error) {
	d := s.d
	key := execKey{t: t, h: h, w: w, first: s.mem == nil, taps: s.taps != nil}
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
	pix, err := tensors.CopyFlatData[float32](outs[0])
	outs[0].FinalizeAll()
	if err == nil && key.taps {
		err = s.readTaps(outs[1+len(memLayers):])
	} else {
		graphexec.Finalize(outs[1+len(memLayers):]...)
	}
	if err != nil {
		return nil, fmt.Errorf("taehv: reading the decoded frames: %w", err)
	}
	return pix, nil
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

// emitRaw hands emit the frames upstream keeps among n raw frames [3, n, H, W] that follow the ones
// already seen.
func (s *Stream) emitRaw(pix []float32, n int, emit func(Frames) error) error {
	r := s.d.cfg.SpatialRatio()
	hh, ww := s.h*r, s.w*r
	plane := hh * ww
	var keep []int
	for i := range n {
		if s.d.cfg.keepRaw(s.raw+i) && (s.limit < 0 || s.out+len(keep) < s.limit) {
			keep = append(keep, i)
		}
	}
	s.raw += n
	if len(keep) == 0 {
		return nil
	}
	sample := make([]float32, 3*len(keep)*plane)
	for c := range 3 {
		for k, i := range keep {
			copy(sample[(c*len(keep)+k)*plane:(c*len(keep)+k+1)*plane], pix[(c*n+i)*plane:(c*n+i+1)*plane])
		}
	}
	f := Frames{Start: s.out, Count: len(keep), Height: hh, Width: ww, Sample: sample}
	s.out += len(keep)
	return emit(f)
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
	r := s.d.cfg.SpatialRatio()
	f := Frames{Start: s.out, Count: missing, Height: s.h * r, Width: s.w * r,
		Sample: make([]float32, 3*missing*s.h*r*s.w*r)} // upstream's zero padding, clamped: 0
	s.out += missing
	return emit(f)
}
