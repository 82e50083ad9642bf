package h3video

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
)

// Frames is a run of consecutive decoded frames, handed to the Decode callback in video order. Its
// Sample is in normalized pixel space (the reference's decode().sample, before de-normalization and
// clamping); Pixels de-normalizes it.
type Frames = modelkit.Frames[imagenetPixels]

// LatentDims checks a latent shape [1, C, T, Hl, Wl] against the config and returns C, T, Hl, Wl.
func (c Config) LatentDims(shape []int, n int) (ch, t, h, w int, err error) {
	if len(shape) != 5 {
		return 0, 0, 0, 0, fmt.Errorf("h3video: latent shape %v must be [1, C, T, H, W]", shape)
	}
	if shape[0] != 1 {
		return 0, 0, 0, 0, fmt.Errorf("h3video: latent batch %d is not supported: decode one video (batch 1) at a time", shape[0])
	}
	if shape[1] != c.LatentChannels {
		return 0, 0, 0, 0, fmt.Errorf("h3video: latents have %d channels, the config has latent_channels=%d", shape[1], c.LatentChannels)
	}
	for i := 2; i < 5; i++ {
		if shape[i] <= 0 {
			return 0, 0, 0, 0, fmt.Errorf("h3video: latent shape %v has a non-positive dimension", shape)
		}
	}
	if got := shape[1] * shape[2] * shape[3] * shape[4]; got != n {
		return 0, 0, 0, 0, fmt.Errorf("h3video: latent shape %v holds %d values, the slice has %d", shape, got, n)
	}
	return shape[1], shape[2], shape[3], shape[4], nil
}

// DenormalizeLatents maps DiT-space latents [1, C, T, H, W] to VAE space: z·latents_std[c] +
// latents_mean[c], rounded per operation in float32 like the reference.
func (c Config) DenormalizeLatents(latents []float32, shape []int) ([]float32, error) {
	return c.mapChannels(latents, shape, func(k int) func(float32) float32 {
		std, mean := f32(c.LatentsStd[k]), f32(c.LatentsMean[k])
		return func(z float32) float32 { return float32(z*std) + mean }
	})
}

// mapChannels applies channel k's map (perChannel(k)) to every value of channel k of latents
// [1, C, T, H, W].
func (c Config) mapChannels(latents []float32, shape []int, perChannel func(k int) func(float32) float32) ([]float32, error) {
	ch, t, h, w, err := c.LatentDims(shape, len(latents))
	if err != nil {
		return nil, err
	}
	return modelkit.MapChannels(latents, ch, t*h*w, perChannel), nil
}

// OutputShape is the decoded video's shape [1, 3, frames, H, W] for a latent shape.
func (c Config) OutputShape(latentShape []int) ([]int, error) {
	_, t, h, w, err := c.LatentDims(latentShape, modelkit.Elements(latentShape))
	if err != nil {
		return nil, err
	}
	plan, err := c.Plan(t)
	if err != nil {
		return nil, err
	}
	r := c.SpatialRatio()
	return []int{1, c.OutChannels, plan.Frames, h * r, w * r}, nil
}

// Decode de-normalizes DiT-space latents [1, C, T, Hl, Wl] and decodes them one temporal clip at a
// time, calling emit with each finished run of frames in order (from the caller's goroutine, while
// the device already decodes the next clip). Peak memory is one clip's worth of decoder activations
// and pixels, whatever T is. ctx is checked between decoder layers; an error from emit stops the
// decode and is returned.
func (d *Decoder) Decode(ctx context.Context, latents []float32, shape []int, emit func(Frames) error) error {
	return modelkit.DecodeLatents(ctx, latents, shape, emit, d.cfg.DenormalizeLatents, d.DecodeDenormalized)
}

// errStopStream ends a decode when a Stream consumer stops ranging.
var errStopStream = errors.New("h3video: stream consumer stopped")

// Stream is Decode as an iterator: it yields each run of frames in order, then a final error if the
// decode failed. Breaking out of the loop stops the decode after the current clip.
//
//	for f, err := range dec.Stream(ctx, latents, shape) { ... }
func (d *Decoder) Stream(ctx context.Context, latents []float32, shape []int) iter.Seq2[Frames, error] {
	return func(yield func(Frames, error) bool) {
		err := d.Decode(ctx, latents, shape, func(f Frames) error {
			if !yield(f, nil) {
				return errStopStream
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopStream) {
			yield(Frames{}, err)
		}
	}
}

// DecodeToPixels decodes DiT-space latents to the whole video [1, 3, frames, H, W] in [0, 1]
// (the reference pipeline's decode_to_pixels output), and returns it with its shape.
func (d *Decoder) DecodeToPixels(ctx context.Context, latents []float32, shape []int) ([]float32, []int, error) {
	return modelkit.DecodeToPixels(ctx, latents, shape, d.cfg.OutputShape, d.Decode)
}

// DecodeDenormalized is Decode for latents already in VAE space (after DenormalizeLatents).
//
// The device work runs in a goroutine of its own, up to two batches of tiles ahead of the host work
// (copying tiles back, stitching, temporal blending and emit), which runs in the caller's goroutine:
// each device execution blocks its caller until the device is done, so this is what keeps the
// accelerator busy while the host stitches and the consumer handles the previous frames.
func (d *Decoder) DecodeDenormalized(ctx context.Context, z []float32, shape []int, emit func(Frames) error) error {
	ctx, unlock, err := d.guard.LockContext(ctx, "h3video: Decode called after Close")
	if err != nil {
		return err
	}
	defer unlock()
	if emit == nil {
		return errors.New("h3video: emit callback is nil")
	}
	_, t, hl, wl, err := d.cfg.LatentDims(shape, len(z))
	if err != nil {
		return err
	}
	plan, err := d.cfg.Plan(t)
	if err != nil {
		return err
	}
	lat := latentView{data: z, c: shape[1], t: t, h: hl, w: wl}
	cp, err := d.planClip(lat)
	if err != nil {
		return err
	}
	return d.decodeClips(ctx, lat, plan.Chunks, cp, d.newClipAssembler(cp, plan.Frames, emit))
}

// batchOut is one decoded batch of tiles, on the device, or the error that ended the decode.
type batchOut struct {
	pix *tensors.Tensor
	err error
}

// decodeOnDevice decodes every batch of the clips (indices, in order) on rep's device, in a goroutine
// of its own, and hands them over on results. stop ends it and frees what was not consumed.
func (d *Decoder) decodeOnDevice(ctx context.Context, rep *replica, lat latentView, clips []int, cp *clipPlan) (results <-chan batchOut, stop func()) {
	devCtx, cancel := context.WithCancel(ctx)
	out := make(chan batchOut, 1)
	chunkTokens := d.cfg.TokensChunkSize()
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		defer close(out)
		for _, k := range clips {
			for _, b := range cp.batches {
				pix, err := d.runBatch(devCtx, rep, lat, k*chunkTokens, cp, b)
				select {
				case out <- batchOut{pix, err}:
				case <-devCtx.Done():
					graphexec.Finalize(pix)
					return
				}
				if err != nil {
					return
				}
			}
		}
	}()
	return out, func() {
		cancel()
		for r := range out {
			graphexec.Finalize(r.pix)
		}
		producer.Wait()
	}
}

// clipAssembler blends each stitched clip over the previous clip's tail and emits the finished
// frames in order.
type clipAssembler struct {
	cfg                   Config
	cp                    *clipPlan
	emit                  func(Frames) error
	oc, plane, clipFrames int
	pre, chunkEnd, frames int
	start                 int       // frames emitted so far
	overlap               []float32 // the previous clip's tail [oc][nOverlap][H][W]
	nOverlap              int
}

func (d *Decoder) newClipAssembler(cp *clipPlan, frames int, emit func(Frames) error) *clipAssembler {
	a := &clipAssembler{
		cfg: d.cfg, cp: cp, emit: emit, oc: d.cfg.OutChannels, plane: cp.hh * cp.ww, clipFrames: cp.frames,
		pre: d.cfg.FramePrePadding(), chunkEnd: d.cfg.TokensChunkSize() * d.cfg.TemporalRatio(), frames: frames,
	}
	return a
}

// emitClip emits the kept frames of the stitched clip canvas [oc][clipFrames][H][W], blended over the
// previous clip's tail, and keeps this clip's tail for the next one (canvas may be reused afterwards).
func (a *clipAssembler) emitClip(canvas []float32) error {
	oc, plane, clipFrames, pre, chunkEnd := a.oc, a.plane, a.clipFrames, a.pre, a.chunkEnd
	kept := chunkEnd - pre
	run := make([]float32, oc*kept*plane)
	for c := 0; c < oc; c++ {
		copy(run[c*kept*plane:(c+1)*kept*plane], canvas[(c*clipFrames+pre)*plane:(c*clipFrames+chunkEnd)*plane])
	}
	if a.overlap != nil {
		blendFrames(a.overlap, a.nOverlap, run, kept, plane, oc, a.cfg.FrameOverlap())
	}
	count := min(kept, a.frames-a.start)
	a.overlap, a.nOverlap = nil, 0
	if a.cfg.TokenDrop > 0 {
		a.nOverlap = max(clipFrames-(chunkEnd+pre), 0)
		a.overlap = make([]float32, oc*a.nOverlap*plane)
		for c := 0; c < oc; c++ {
			copy(a.overlap[c*a.nOverlap*plane:(c+1)*a.nOverlap*plane], canvas[(c*clipFrames+chunkEnd+pre)*plane:(c+1)*clipFrames*plane])
		}
	}
	return a.emitRun(run, kept, count)
}

// emitRun emits the first count of the n frames of run [oc][n][H][W] (none when count ≤ 0).
func (a *clipAssembler) emitRun(run []float32, n, count int) error {
	if count <= 0 {
		return nil
	}
	f := Frames{Start: a.start, Count: count, Height: a.cp.hh, Width: a.cp.ww, Sample: trimFrames(run, n, count, a.plane, a.oc)}
	if err := a.emit(f); err != nil {
		return err
	}
	a.start += count
	return nil
}

// finish emits the last clip's tail and checks that every frame of the plan was emitted.
func (a *clipAssembler) finish() error {
	if a.overlap != nil {
		if err := a.emitRun(a.overlap, a.nOverlap, min(a.nOverlap, a.frames-a.start)); err != nil {
			return err
		}
	}
	if a.start != a.frames {
		return fmt.Errorf("h3video: internal error: decoded %d frames, the plan has %d", a.start, a.frames)
	}
	return nil
}

// trimFrames keeps the first count of n frames of a [oc][n][plane] buffer.
func trimFrames(buf []float32, n, count, plane, oc int) []float32 {
	if count == n {
		return buf
	}
	out := make([]float32, oc*count*plane)
	for c := 0; c < oc; c++ {
		copy(out[c*count*plane:(c+1)*count*plane], buf[c*n*plane:(c*n+count)*plane])
	}
	return out
}

// blendFrames blends the leading frames of b [oc][nb][plane] with the trailing frames of a
// [oc][na][plane] along time, with the reference's linear ramp.
func blendFrames(a []float32, na int, b []float32, nb, plane, oc, extent int) {
	e := min(na, nb, extent)
	for i := 0; i < e; i++ {
		wa, wb := rampWeights(i, e)
		for c := 0; c < oc; c++ {
			ra := a[(c*na+na-e+i)*plane : (c*na+na-e+i+1)*plane]
			rb := b[(c*nb+i)*plane : (c*nb+i+1)*plane]
			for j := range rb {
				rb[j] = float32(ra[j]*wa) + float32(rb[j]*wb)
			}
		}
	}
}

// rampWeights are the reference _blend weights for position i of e, in float32:
// w_b = i/e, w_a = 1 − i/e.
func rampWeights(i, e int) (wa, wb float32) {
	wb = float32(i) / float32(e)
	return 1 - wb, wb
}

// latentView reads a [C][T][H][W] latent with the last frame repeated past T (the reference pads the
// final clip by repeating the last latent frame).
type latentView struct {
	data       []float32
	c, t, h, w int
}

// tile copies latent frames [t0, t0+nt) and the spatial window [y0, y0+nh)×[x0, x0+nw) into a
// [1, C, nt, nh, nw] tensor.
func (l latentView) tile(t0, nt, y0, nh, x0, nw int) *tensors.Tensor {
	out := make([]float32, l.c*nt*nh*nw)
	l.window(out, t0, nt, y0, nh, x0, nw)
	return tensors.FromFlatDataAndDimensions(out, 1, l.c, nt, nh, nw)
}

// window writes latent frames [t0, t0+nt) of the window [y0, y0+nh)×[x0, x0+nw) to out [C][nt][nh][nw].
func (l latentView) window(out []float32, t0, nt, y0, nh, x0, nw int) {
	i := 0
	for c := 0; c < l.c; c++ {
		for f := t0; f < t0+nt; f++ {
			src := min(f, l.t-1)
			for y := y0; y < y0+nh; y++ {
				base := ((c*l.t+src)*l.h+y)*l.w + x0
				copy(out[i:i+nw], l.data[base:base+nw])
				i += nw
			}
		}
	}
}

// tilePlan is one spatial tile of a clip: its latent window and where its kept part goes.
type tilePlan struct {
	ly0, lx0, lh, lw int // latent window
	stitch           stitch
	up, left         int // indices of the tiles above and to the left in clipPlan.tiles, or -1
}

// clipPlan is the spatial tiling shared by every clip of a decode, and the grouping of its tiles
// into device calls: a batch holds tiles of one size, in raster order.
type clipPlan struct {
	tiles          []tilePlan
	batches        [][]int
	nt, frames     int // latent frames and decoded frames of a clip
	hh, ww, planes int // canvas size in pixels; planes = oc × frames
	ratio          int // pixels per latent
}

// maxBatchElements bounds the residual stream of one device call (tokens × width) when
// Options.TileBatch is 0: 24,576 tokens of the release's width 2048, which holds the 12 tiles of a
// 480×832 clip (1,797 tokens each) in one call. The transient activations of a block are about 12×
// this in bytes (the FFN's input projection dominates), a little over 2 GiB for the release.
const maxBatchElements = 24576 * 2048

// planClip lays out the spatial tiles of a clip like the reference's _decode_clip and groups them
// into batches.
func (d *Decoder) planClip(lat latentView) (*clipPlan, error) {
	ratio := d.cfg.SpatialRatio()
	hh, ww := lat.h*ratio, lat.w*ratio
	nt := d.cfg.ClipTokens()
	frames := nt * d.cfg.TemporalRatio()
	cp := &clipPlan{nt: nt, frames: frames, hh: hh, ww: ww, planes: d.cfg.OutChannels * frames, ratio: ratio}
	ys, xs := Tiles{Starts: []int{0}, Sizes: []int{hh}}, Tiles{Starts: []int{0}, Sizes: []int{ww}}
	if !d.opts.DisableTiling {
		th, tw, oh, ow := d.tileSizes()
		var err error
		if ys, err = SplitTiles(hh, th, oh, ratio); err != nil {
			return nil, err
		}
		if xs, err = SplitTiles(ww, tw, ow, ratio); err != nil {
			return nil, err
		}
	}
	y := 0 // canvas row where the current tile row's kept part starts
	for r := range ys.Starts {
		x, keptH := 0, 0
		for c := range xs.Starts {
			ly0, lx0 := ys.Starts[r]/ratio, xs.Starts[c]/ratio
			tp := tilePlan{ly0: ly0, lx0: lx0, lh: min(ys.Sizes[r]/ratio, lat.h-ly0), lw: min(xs.Sizes[c]/ratio, lat.w-lx0),
				up: -1, left: -1}
			th, tw := tp.lh*ratio, tp.lw*ratio
			st := stitch{y: y, x: x, kh: th, kw: tw}
			if r > 0 {
				tp.up = len(cp.tiles) - len(xs.Starts)
				st.eUp = min(cp.tiles[tp.up].lh*ratio, th, ys.Overlaps[r-1])
			}
			if c > 0 {
				tp.left = len(cp.tiles) - 1
				st.eLeft = min(cp.tiles[tp.left].lw*ratio, tw, xs.Overlaps[c-1])
			}
			if r < len(ys.Starts)-1 {
				st.kh -= ys.Overlaps[r]
			}
			if c < len(xs.Starts)-1 {
				st.kw -= xs.Overlaps[c]
			}
			st.kh, st.kw = min(st.kh, hh-y), min(st.kw, ww-x)
			tp.stitch = st
			cp.tiles = append(cp.tiles, tp)
			x += st.kw
			keptH = st.kh
		}
		y += keptH
	}
	cp.batches = batchTiles(cp.tiles, func(tp tilePlan) int {
		switch {
		case d.opts.TileBatch > 0:
			return d.opts.TileBatch
		case d.backend.Name() != "xla":
			// The pure-Go backend gains nothing from batching (one tile's matmuls already fill the
			// CPU), and its matmul kernel sums a row differently depending on where the row falls
			// in the flattened batch, so tile by tile keeps results independent of the batching.
			return 1
		}
		tokens := nt*tp.lh*tp.lw + d.cfg.DecoderNumRegisters + 1
		return max(1, maxBatchElements/(tokens*d.cfg.Width()))
	})
	return cp, nil
}

// batchTiles groups tile indices by latent window size (in first-appearance order, raster order
// within a group) and splits each group into the fewest batches of at most limit tiles, of sizes
// that differ by at most one (so that at most two batch shapes are compiled per tile size).
func batchTiles(tiles []tilePlan, limit func(tilePlan) int) [][]int {
	var order [][2]int
	groups := map[[2]int][]int{}
	for i, tp := range tiles {
		g := [2]int{tp.lh, tp.lw}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	var batches [][]int
	for _, g := range order {
		idx := groups[g]
		maxB := limit(tiles[idx[0]])
		total := len(idx)
		n := (total + maxB - 1) / maxB
		for b := 0; b < n; b++ {
			size := total / n
			if b < total%n {
				size++
			}
			batches = append(batches, idx[:size])
			idx = idx[size:]
		}
	}
	return batches
}

// runBatch decodes the tiles idx of the clip starting at latent frame t0 and returns their pixels
// on the device, [B, oc, frames, h·p, w·p].
func (d *Decoder) runBatch(ctx context.Context, rep *replica, lat latentView, t0 int, cp *clipPlan, idx []int) (*tensors.Tensor, error) {
	dims := cp.batchDims(lat.c, idx)
	n := dims[1] * dims[2] * dims[3] * dims[4]
	z := make([]float32, len(idx)*n)
	for b, i := range idx {
		w := cp.tiles[i]
		lat.window(z[b*n:(b+1)*n], t0, cp.nt, w.ly0, w.lh, w.lx0, w.lw)
	}
	return d.decodeTiles(ctx, rep, tensors.FromFlatDataAndDimensions(z, dims...), nil)
}

// batchDims is the shape [B, C, nt, lh, lw] of the latent tiles idx of a clip of c channels (the
// float32 input runBatch hands the pre graph, and Prepare compiles it for).
func (cp *clipPlan) batchDims(c int, idx []int) []int {
	tp := cp.tiles[idx[0]]
	return []int{len(idx), c, cp.nt, tp.lh, tp.lw}
}

// Prepare compiles every program that Decode (or DecodeDenormalized) of latents of shape
// [1, C, T, Hl, Wl] runs with this decoder's options, without the latents and without running
// anything on the device, so that such a decode compiles nothing. It walks the clip plan and batches
// Decode walks (planClip, batchDims) and chains each program's output shapes into the next. A
// pipeline calls it on a goroutine while the DiT denoises (docs/architecture.md, "Decoder
// prewarm"); it may run beside a decode, and Close waits for it. ctx is checked between programs.
func (d *Decoder) Prepare(ctx context.Context, shape []int) error {
	ctx, unlock, err := d.guard.RLockContext(ctx, "h3video: Prepare called after Close")
	if err != nil {
		return err
	}
	defer unlock()
	_, t, hl, wl, err := d.cfg.LatentDims(shape, modelkit.Elements(shape))
	if err != nil {
		return err
	}
	if _, err := d.cfg.Plan(t); err != nil {
		return err
	}
	cp, err := d.planClip(latentView{c: shape[1], t: t, h: hl, w: wl})
	if err != nil {
		return err
	}
	for _, idx := range cp.batches {
		if err := ctx.Err(); err != nil {
			return err
		}
		dims := cp.batchDims(shape[1], idx)
		if err := d.compileTiles(ctx, d.replicas[0], dims); err != nil {
			return fmt.Errorf("h3video: compiling the decode of %d latent tile(s) of %d×%d×%d: %w", dims[0], dims[2], dims[3], dims[4], err)
		}
	}
	return nil
}

// compileTiles compiles the programs decodeTiles runs on tiles of shape dims, in its order: pre,
// every block (one program for all, as their weights share shapes; each is asked, as runBlocks
// calls each), then post. The programs are portable, so one compile serves every replica.
func (d *Decoder) compileTiles(ctx context.Context, rep *replica, dims []int) error {
	geom := [3]int{dims[2], dims[3], dims[4]}
	out, err := graphexec.Compile(d.preExec, append([]shapes.Shape{shapes.Make(dtypes.Float32, dims...)}, graphexec.Shapes(rep.pre()...)...)...)
	if err != nil {
		return err
	}
	x, rope := out[0], d.ropeShape(geom)
	for i := range rep.blocks {
		if err := ctx.Err(); err != nil {
			return err
		}
		args := blockInputs[shapes.Shape]{X: x, Cos: rope, Sin: rope}
		if out, err = graphexec.Compile(d.blockExec, append(graphexec.Values(&args), graphexec.Shapes(rep.block(i)...)...)...); err != nil {
			return err
		}
		x = out[0]
	}
	post, err := d.postFor(geom)
	if err != nil {
		return err
	}
	_, err = graphexec.Compile(post, append([]shapes.Shape{x}, graphexec.Shapes(rep.post()...)...)...)
	return err
}

// clipStitcher assembles one clip's canvas from batches of decoded tiles. Tiles are stitched in
// background goroutines as soon as they and their upper and left neighbours are on the host, so the
// host blending of one batch overlaps the copy of the next.
type clipStitcher struct {
	backend compute.Backend
	dev     compute.DeviceNum // where the decoded tiles are
	cp      *clipPlan
	canvas  []float32
	bufs    [][]float32 // host copy of each batch, reused between clips
	tiles   []*tile     // each decoded tile [oc·frames][h·p][w·p] (a view into a buffer), nil until copied
	started []bool
	wg      sync.WaitGroup
}

func newClipStitcher(backend compute.Backend, dev compute.DeviceNum, cp *clipPlan, canvas []float32) *clipStitcher {
	return &clipStitcher{backend: backend, dev: dev, cp: cp, canvas: canvas, bufs: make([][]float32, len(cp.batches)),
		tiles: make([]*tile, len(cp.tiles)), started: make([]bool, len(cp.tiles))}
}

// reset starts a new clip; the previous one must have been waited for.
func (s *clipStitcher) reset() {
	clear(s.tiles)
	clear(s.started)
}

// wait blocks until every started stitch has finished.
func (s *clipStitcher) wait() { s.wg.Wait() }

// add copies batch bi of the clip (pix [B, oc, frames, h·p, w·p] on the device) to the host and
// starts the stitches that have become possible.
func (s *clipStitcher) add(bi int, pix *tensors.Tensor) error {
	idx := s.cp.batches[bi]
	n := pix.Shape().Size()
	if len(s.bufs[bi]) != n {
		s.bufs[bi] = make([]float32, n)
	}
	buf := s.bufs[bi]
	b, err := pix.Buffer(s.backend, s.dev)
	if err != nil {
		return err
	}
	if err := b.ToFlatData(buf); err != nil {
		return err
	}
	per := n / len(idx)
	for j, i := range idx {
		tp := s.cp.tiles[i]
		s.tiles[i] = &tile{data: buf[j*per : (j+1)*per], h: tp.lh * s.cp.ratio, w: tp.lw * s.cp.ratio}
	}
	for i, tp := range s.cp.tiles {
		if s.started[i] || s.tiles[i] == nil || (tp.up >= 0 && s.tiles[tp.up] == nil) || (tp.left >= 0 && s.tiles[tp.left] == nil) {
			continue
		}
		s.started[i] = true
		st := tp.stitch
		st.cur = s.tiles[i]
		if tp.up >= 0 {
			st.up = s.tiles[tp.up]
		}
		if tp.left >= 0 {
			st.left = s.tiles[tp.left]
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			st.run(s.canvas, s.cp.planes, s.cp.hh, s.cp.ww)
		}()
	}
	return nil
}

// decodeClip decodes latent frames [t0, t0+ClipTokens) over the whole canvas, tiling and blending
// like the reference's _decode_clip, into canvas [oc][frames][H][W] (every element is overwritten).
// It returns the clip's frame count. DecodeDenormalized does the same with the device work of the
// next batches overlapping the host work.
func (d *Decoder) decodeClip(ctx context.Context, lat latentView, t0 int, canvas []float32) (int, error) {
	cp, err := d.planClip(lat)
	if err != nil {
		return 0, err
	}
	if len(canvas) != cp.planes*cp.hh*cp.ww {
		return 0, fmt.Errorf("h3video: internal error: canvas has %d values, want %d", len(canvas), cp.planes*cp.hh*cp.ww)
	}
	rep := d.replicas[0]
	st := newClipStitcher(d.backend, rep.dev, cp, canvas)
	defer st.wait() // never return while a stitch still writes into canvas
	for bi, idx := range cp.batches {
		pix, err := d.runBatch(ctx, rep, lat, t0, cp, idx)
		if err != nil {
			return 0, err
		}
		err = st.add(bi, pix)
		graphexec.Finalize(pix)
		if err != nil {
			return 0, err
		}
	}
	return cp.frames, nil
}

// tile is one decoded spatial tile [oc][frames][h][w].
type tile struct {
	data []float32
	h, w int
}

// stitch places one decoded tile's kept part [kh×kw] at canvas (y, x), blended like FastVideo's
// _stitch_tiles: first its top eUp rows with the bottom rows of the (unblended) tile above, then its
// left eLeft columns with the right columns of the (unblended) tile to its left.
type stitch struct {
	cur, up, left *tile
	eUp, eLeft    int
	y, x, kh, kw  int
}

func (s stitch) run(canvas []float32, planes, hh, ww int) {
	cur := s.cur
	var was, wbs []float32
	if s.left != nil {
		was, wbs = make([]float32, s.eLeft), make([]float32, s.eLeft)
		for i := range was {
			was[i], wbs[i] = rampWeights(i, s.eLeft)
		}
	}
	for p := 0; p < planes; p++ {
		for j := 0; j < s.kh; j++ {
			dst := canvas[(p*hh+s.y+j)*ww+s.x : (p*hh+s.y+j)*ww+s.x+s.kw]
			src := cur.data[(p*cur.h+j)*cur.w : (p*cur.h+j)*cur.w+s.kw]
			if s.up != nil && j < s.eUp {
				wa, wb := rampWeights(j, s.eUp)
				up := s.up
				a := up.data[(p*up.h+up.h-s.eUp+j)*up.w : (p*up.h+up.h-s.eUp+j)*up.w+s.kw]
				for i := range dst {
					dst[i] = float32(a[i]*wa) + float32(src[i]*wb)
				}
			} else {
				copy(dst, src)
			}
			if s.left != nil {
				left := s.left
				a := left.data[(p*left.h+j)*left.w+left.w-s.eLeft : (p*left.h+j+1)*left.w]
				for i := 0; i < min(s.eLeft, s.kw); i++ {
					dst[i] = float32(a[i]*was[i]) + float32(dst[i]*wbs[i])
				}
			}
		}
	}
}

// actHook receives named intermediate tensors of a tile decode (parity tests only).
type actHook func(name string, t *tensors.Tensor)

// decodeTile runs post_quant_conv and the ViT decoder on one [1, C, nt, h, w] latent tile (which it
// consumes) and returns its pixels [oc][nt·pt][h·p][w·p] (normalized pixel space). hook, when set,
// sees intermediate tensors and must copy what it keeps before returning.
func (d *Decoder) decodeTile(ctx context.Context, z *tensors.Tensor, hook actHook) ([]float32, error) {
	pix, err := d.decodeTiles(ctx, d.replicas[0], z, hook)
	if err != nil {
		return nil, err
	}
	defer graphexec.Finalize(pix)
	out := make([]float32, pix.Shape().Size())
	err = graphexec.Catch("", func() error {
		b, err := pix.Buffer(d.backend, 0)
		if err != nil {
			return err
		}
		return b.ToFlatData(out)
	})
	if err != nil {
		return nil, fmt.Errorf("h3video: copying a decoded tile from the device: %w", err)
	}
	return out, nil
}

// decodeTiles runs post_quant_conv and the ViT decoder on a batch of equally sized latent tiles
// z [B, C, nt, h, w] (which it consumes) in one call per graph on rep's device, and returns their
// pixels [B, oc, nt·pt, h·p, w·p] (normalized pixel space) there; the caller frees them. hook, when
// set, sees intermediate tensors and must copy what it keeps before returning.
func (d *Decoder) decodeTiles(ctx context.Context, rep *replica, z *tensors.Tensor, hook actHook) (*tensors.Tensor, error) {
	dims := z.Shape().Dimensions
	geom := [3]int{dims[2], dims[3], dims[4]}
	x, err := d.runBlocks(ctx, rep, z, geom, hook)
	var pix *tensors.Tensor
	if err == nil {
		pix, err = d.project(rep, x, geom)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("h3video: decoding %d latent tile(s) of %d×%d×%d: %w", dims[0], geom[0], geom[1], geom[2], err)
	}
	return pix, nil
}

// runBlocks runs post_quant_conv, proj_in and every transformer block on the tiles z (consumed) of
// geometry geom, checking ctx between blocks, and returns the residual stream on the device.
func (d *Decoder) runBlocks(ctx context.Context, rep *replica, z *tensors.Tensor, geom [3]int, hook actHook) (*tensors.Tensor, error) {
	defer graphexec.Finalize(z)
	rope, err := d.ropeFor(rep, geom)
	if err != nil {
		return nil, err
	}
	res, err := graphexec.CallOn(d.preExec, rep.dev, graphexec.Args([]any{z}, rep.pre()...)...)
	if err != nil {
		return nil, err
	}
	x := res[0]
	if hook != nil {
		hook("post_quant_conv", res[1])
		hook("proj_in", x)
	}
	graphexec.Finalize(res[1])
	for i := range rep.blocks {
		if err := ctx.Err(); err != nil {
			graphexec.Finalize(x)
			return nil, err
		}
		args := blockInputs[*tensors.Tensor]{X: x, Cos: rope[0], Sin: rope[1]}
		out, err := graphexec.CallOn(d.blockExec, rep.dev, graphexec.Pack(&args, rep.block(i)...)...)
		graphexec.Finalize(x)
		if err != nil {
			return nil, err
		}
		x = out[0]
		if hook != nil && i == 0 {
			hook("block0", x)
		}
	}
	return x, nil
}

// project runs norm_out, proj_out and the unpatchify of geometry geom on x (consumed): the pixels
// [B, oc, nt·pt, h·p, w·p] on the device.
func (d *Decoder) project(rep *replica, x *tensors.Tensor, geom [3]int) (*tensors.Tensor, error) {
	defer graphexec.Finalize(x)
	post, err := d.postFor(geom)
	if err != nil {
		return nil, err
	}
	out, err := graphexec.CallOn(post, rep.dev, graphexec.Args([]any{x}, rep.post()...)...)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// ropeFor returns the RoPE tables of a tile geometry on rep's device (cached; a replica is used by one
// goroutine at a time).
func (d *Decoder) ropeFor(rep *replica, geom [3]int) ([2]*tensors.Tensor, error) {
	if r, ok := rep.ropes[geom]; ok {
		return r, nil
	}
	rot := d.cfg.RotaryDim()
	cos, sin := ropeTables(geom[0], geom[1], geom[2], d.cfg.DecoderNumRegisters+1, rot, d.cfg.DecoderRopeTheta)
	dims := d.ropeShape(geom).Dimensions
	if len(cos) != dims[0]*dims[1] {
		return [2]*tensors.Tensor{}, fmt.Errorf("h3video: internal error: RoPE table of %d values, want %v", len(cos), dims)
	}
	r := [2]*tensors.Tensor{
		tensors.FromFlatDataAndDimensions(cos, dims...),
		tensors.FromFlatDataAndDimensions(sin, dims...),
	}
	for _, t := range r {
		if err := t.ToDevice(d.backend, rep.dev); err != nil {
			graphexec.Finalize(r[:]...)
			return r, err
		}
	}
	rep.ropes[geom] = r
	return r, nil
}

// ropeShape is the shape of each RoPE table of a tile geometry: [L, rot] float32 for the tile's
// tokens, its registers and its zero token (ropeTables).
func (d *Decoder) ropeShape(geom [3]int) shapes.Shape {
	return shapes.Make(dtypes.Float32, geom[0]*geom[1]*geom[2]+d.cfg.DecoderNumRegisters+1, d.cfg.RotaryDim())
}

// postFor returns the output graph of a tile geometry (the unpatchify needs t, h, w, which the token
// count alone does not determine).
func (d *Decoder) postFor(geom [3]int) (*Exec, error) {
	d.postMu.Lock() // lanes of a clip-parallel decode ask at once
	defer d.postMu.Unlock()
	return d.postExecs.Get(geom, func() (*Exec, error) {
		return NewExec(d.backend, func(in []*Node) *Node { return d.gs.post(geom[0], geom[1], geom[2], in) })
	})
}
