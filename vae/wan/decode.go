package wan

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
)

// Frames is a run of consecutive decoded frames, handed to the Decode callback in video order. Its
// Sample is clamped to [-1, 1] (the reference's AutoencoderKLWan.decode); Pixels maps it to [0, 1].
type Frames = modelkit.Frames[signedPixels]

// Decode de-normalizes DiT-space latents [1, z, T, h, w] (z·latents_std + latents_mean, as the
// pipeline's decoding stage does) and decodes them one latent frame at a time, calling emit with
// the 1 frame of the first latent frame and then 4 frames per latent frame. Memory stays flat in
// T. ctx is checked between chunks and tiles; an error from emit stops the decode and is returned.
func (d *Decoder) Decode(ctx context.Context, latents []float32, shape []int, emit func(Frames) error) error {
	return modelkit.DecodeLatents(ctx, latents, shape, emit, d.cfg.DenormalizeLatents, d.DecodeDenormalized)
}

// DecodeDenormalized is Decode for latents already in VAE space (after DenormalizeLatents; what
// AutoencoderKLWan.decode takes).
func (d *Decoder) DecodeDenormalized(ctx context.Context, z []float32, shape []int, emit func(Frames) error) error {
	if emit == nil {
		return errors.New("wan: emit callback is nil")
	}
	return d.decode(ctx, z, shape, emit, nil)
}

// DecodeToPixels decodes DiT-space latents to the whole video [1, 3, frames, H, W] in [0, 1]
// (the reference decoding stage's (x/2 + 0.5).clamp(0, 1)) and returns it with its shape. It
// holds the whole video in memory; stream with Decode for long videos.
func (d *Decoder) DecodeToPixels(ctx context.Context, latents []float32, shape []int) ([]float32, []int, error) {
	return modelkit.DecodeToPixels(ctx, latents, shape, d.cfg.OutputShape, d.Decode)
}

// span is a run [start, start+size) of latent rows or columns decoded as one tile, of which the
// first keep·ratio pixels land in the output.
type span struct{ start, size, keep int }

// tileSpans splits a latent length like FastVideo's spatial_tiled_decode: tiles of tile latents
// starting every stride latents, each keeping its first stride latents' worth of pixels.
func tileSpans(length, tile, stride int) []span {
	var out []span
	for i := 0; i < length; i += stride {
		size := min(tile, length-i)
		out = append(out, span{start: i, size: size, keep: min(stride, size)})
	}
	return out
}

// plan returns the tile spans along h and w. Without tiling, or when the latent canvas fits one
// tile (the reference tiles only then), it is one span per axis.
func (d *Decoder) plan(h, w int) (ys, xs []span) {
	r := d.cfg.SpatialRatio()
	tile, stride := d.opts.TileSize/r, d.opts.TileStride/r
	if !d.opts.Tiling || (h <= tile && w <= tile) {
		return []span{{0, h, h}}, []span{{0, w, w}}
	}
	return tileSpans(h, tile, stride), tileSpans(w, tile, stride)
}

// pixTile is one decoded tile [3][frames][h][w] in pixels.
type pixTile struct {
	data []float32
	h, w int
}

// tapHook receives the intermediate outputs of each chunk (parity tests; whole-canvas decode only).
type tapHook func(chunk int, name string, data []float32, shape []int)

// decode runs the chunk loop: for every latent frame, every tile with its own feature cache, then
// the tiles' blend into the frame canvas.
func (d *Decoder) decode(ctx context.Context, z []float32, shape []int, emit func(Frames) error, hook tapHook) error {
	ctx, unlock, err := d.guard.LockContext(ctx, "wan: Decode called after Close")
	if err != nil {
		return err
	}
	defer unlock()
	t, h, w, err := d.cfg.LatentDims(shape, len(z))
	if err != nil {
		return err
	}
	ys, xs := d.plan(h, w)
	if hook != nil && (len(ys) > 1 || len(xs) > 1) {
		return errors.New("wan: internal error: activation taps need a single tile")
	}
	fd := &frameDecoder{d: d, z: z, t: t, h: h, w: w, ys: ys, xs: xs, hook: hook,
		caches: make([][]*tensors.Tensor, len(ys)*len(xs))}
	defer fd.close()
	r := d.cfg.SpatialRatio()
	hh, ww, nc := h*r, w*r, d.cfg.PixelChannels()
	blendPx := d.opts.TileSize - d.opts.TileStride // used only with several tiles
	start := 0
	for k := 0; k < t; k++ {
		tiles, frames, err := fd.frame(ctx, k)
		if err != nil {
			return err
		}
		var sample []float32
		if len(ys) == 1 && len(xs) == 1 {
			sample = tiles[0][0].data
		} else {
			sample = mergeTiles(tiles, ys, xs, r, nc*frames, hh, ww, blendPx)
		}
		if err := emit(Frames{Start: start, Count: frames, Height: hh, Width: ww, Sample: sample}); err != nil {
			return err
		}
		start += frames
	}
	if start != d.cfg.NumFrames(t) {
		return fmt.Errorf("wan: internal error: decoded %d frames, want %d", start, d.cfg.NumFrames(t))
	}
	return nil
}

// frameDecoder decodes a latent [z][t][h][w] one latent frame at a time over the tiles ys × xs, each
// tile carrying its feature cache from frame to frame.
type frameDecoder struct {
	d       *Decoder
	z       []float32
	t, h, w int
	ys, xs  []span
	hook    tapHook
	caches  [][]*tensors.Tensor // per tile
}

func (fd *frameDecoder) close() {
	for _, cs := range fd.caches {
		graphexec.Finalize(cs...)
	}
}

// frame decodes latent frame k: every tile's pixels, and the number of frames they hold.
func (fd *frameDecoder) frame(ctx context.Context, k int) (tiles [][]*pixTile, frames int, err error) {
	key := chunkKey(k, fd.hook != nil)
	exec, err := fd.d.exec(key)
	if err != nil {
		return nil, 0, err
	}
	tiles = make([][]*pixTile, len(fd.ys))
	for i := range fd.ys {
		tiles[i] = make([]*pixTile, len(fd.xs))
	}
	err = eachTile(ctx, fd.ys, fd.xs, func(i, j, slot int) error {
		tiles[i][j], frames, err = fd.tile(exec, key, k, slot, fd.ys[i], fd.xs[j])
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return tiles, frames, nil
}

// chunkKey is the graph that decodes latent frame k (the first has no caches to read).
func chunkKey(k int, taps bool) execKey { return execKey{first: k == 0, taps: taps} }

// eachTile calls fn for every tile of ys × xs in raster order, with the slot of its caches, after a
// check of ctx.
func eachTile(ctx context.Context, ys, xs []span, fn func(i, j, slot int) error) error {
	for i := range ys {
		for j := range xs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(i, j, i*len(xs)+j); err != nil {
				return err
			}
		}
	}
	return nil
}

// Prepare compiles every program that Decode (or DecodeDenormalized) of latents of shape
// [1, z, T, h, w] runs with this decoder's options, without the latents and without running
// anything on the device, so that such a decode compiles nothing. It walks the chunks and tiles
// decode walks (chunkKey, eachTile, tileDims) and feeds each tile's cache output shapes to its next
// chunk, as decode feeds the caches. A pipeline calls it on a goroutine while the DiT denoises
// (docs/architecture.md, "Decoder prewarm"); a decode or Close waits for it. ctx is checked between
// programs.
func (d *Decoder) Prepare(ctx context.Context, shape []int) error {
	ctx, unlock, err := d.guard.LockContext(ctx, "wan: Prepare called after Close")
	if err != nil {
		return err
	}
	defer unlock()
	t, h, w, err := d.cfg.LatentDims(shape, modelkit.Elements(shape))
	if err != nil {
		return err
	}
	ys, xs := d.plan(h, w)
	params := graphexec.ParamShapes(d.params...)
	nSlots := d.cfg.numCacheSlots()
	caches := make([][]shapes.Shape, len(ys)*len(xs))
	for k := 0; k < t; k++ {
		exec, err := d.exec(chunkKey(k, false))
		if err != nil {
			return err
		}
		err = eachTile(ctx, ys, xs, func(i, j, slot int) error {
			in := append([]shapes.Shape{shapes.Make(dtypes.Float32, tileDims(d.cfg.ZDim, ys[i], xs[j])...)}, params...)
			out, err := graphexec.Compile(exec, append(in, caches[slot]...)...)
			if err != nil {
				return fmt.Errorf("wan: compiling the decode of latent frame %d (tile of %d×%d latents): %w", k, ys[i].size, xs[j].size, err)
			}
			if len(out) < 1+nSlots {
				return fmt.Errorf("wan: internal error: the chunk graph has %d outputs, want %d", len(out), 1+nSlots)
			}
			caches[slot] = out[1 : 1+nSlots]
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// tile decodes latent frame k of one tile (slot of the caches) and hands the taps to the hook.
func (fd *frameDecoder) tile(exec *graph.Exec, key execKey, k, slot int, ysp, xsp span) (*pixTile, int, error) {
	d, r := fd.d, fd.d.cfg.SpatialRatio()
	zt := latentTile(fd.z, d.cfg.ZDim, fd.t, fd.h, fd.w, k, ysp, xsp)
	args := graphexec.ParamArgs([]any{zt}, d.params...)
	outs, err := graphexec.Call(exec, graphexec.Args(args, fd.caches[slot]...)...)
	zt.FinalizeAll()
	if err != nil {
		return nil, 0, fmt.Errorf("wan: decoding latent frame %d (tile at %d,%d of %d×%d latents): %w", k, ysp.start, xsp.start, ysp.size, xsp.size, err)
	}
	nSlots := d.cfg.numCacheSlots()
	graphexec.Finalize(fd.caches[slot]...)
	fd.caches[slot] = outs[1 : 1+nSlots]
	pix := outs[0]
	frames := pix.Shape().Dim(2)
	data, err := graphexec.TakeF32(pix)
	if err != nil {
		graphexec.Finalize(outs[1+nSlots:]...)
		return nil, 0, fmt.Errorf("wan: reading decoded pixels: %w", err)
	}
	if key.taps {
		if err := fd.taps(k, outs[1+nSlots:]); err != nil {
			return nil, 0, err
		}
	}
	return &pixTile{data: data, h: ysp.size * r, w: xsp.size * r}, frames, nil
}

// taps reads the intermediate outputs of latent frame k (named tapNames) into the hook.
func (fd *frameDecoder) taps(k int, outs []*tensors.Tensor) error {
	for n, name := range tapNames {
		tt := outs[n]
		vals, err := tensors.CopyFlatData[float32](tt)
		dims := tt.Shape().Dimensions
		tt.FinalizeAll()
		if err != nil {
			return fmt.Errorf("wan: reading tap %s: %w", name, err)
		}
		fd.hook(k, name, vals, dims)
	}
	return nil
}

// latentTile copies latent frame k over the spatial window ys × xs into a [1, z, 1, nh, nw] tensor.
func latentTile(z []float32, zc, t, h, w, k int, ys, xs span) *tensors.Tensor {
	dims := tileDims(zc, ys, xs)
	out := make([]float32, zc*ys.size*xs.size)
	i := 0
	for c := 0; c < zc; c++ {
		for y := ys.start; y < ys.start+ys.size; y++ {
			base := ((c*t+k)*h+y)*w + xs.start
			copy(out[i:i+xs.size], z[base:base+xs.size])
			i += xs.size
		}
	}
	return tensors.FromFlatDataAndDimensions(out, dims...)
}

// tileDims is the shape [1, z, 1, nh, nw] of one latent frame of the tile ys × xs (float32).
func tileDims(zc int, ys, xs span) []int { return []int{1, zc, 1, ys.size, xs.size} }

// mergeTiles is FastVideo's _merge_spatial_tiles on the frames of one chunk: in tile order, each
// tile's top rows are blended in place with the bottom rows of the (already blended) tile above,
// then its left columns with the right columns of the (already blended) tile to its left, and its
// first keep rows and columns are placed on the canvas [planes][hh][ww].
func mergeTiles(tiles [][]*pixTile, ys, xs []span, r, planes, hh, ww, blend int) []float32 {
	canvas := make([]float32, planes*hh*ww)
	y0 := 0
	for i := range ys {
		x0 := 0
		for j := range xs {
			b := tiles[i][j]
			if i > 0 {
				blendV(tiles[i-1][j], b, planes, blend)
			}
			if j > 0 {
				blendHoriz(tiles[i][j-1], b, planes, blend)
			}
			kh, kw := ys[i].keep*r, xs[j].keep*r
			for p := 0; p < planes; p++ {
				for y := 0; y < kh; y++ {
					copy(canvas[(p*hh+y0+y)*ww+x0:(p*hh+y0+y)*ww+x0+kw], b.data[(p*b.h+y)*b.w:(p*b.h+y)*b.w+kw])
				}
			}
			x0 += kw
		}
		y0 += ys[i].keep * r
	}
	return canvas
}

// blendWeights are the reference ramp for position i of e: (1 − i/e, i/e), computed in float64
// like the Python scalars and rounded to float32 as the tensor product does.
func blendWeights(i, e int) (wa, wb float32) {
	f := float64(i) / float64(e)
	return float32(1 - f), float32(f)
}

// blendV is blend_v: b's first e rows ← a's last e rows·(1−y/e) + b's rows·(y/e).
func blendV(a, b *pixTile, planes, extent int) {
	e := min(a.h, b.h, extent)
	for y := 0; y < e; y++ {
		wa, wb := blendWeights(y, e)
		for p := 0; p < planes; p++ {
			ra := a.data[(p*a.h+a.h-e+y)*a.w : (p*a.h+a.h-e+y+1)*a.w]
			rb := b.data[(p*b.h+y)*b.w : (p*b.h+y+1)*b.w]
			for x := range rb {
				rb[x] = float32(ra[x]*wa) + float32(rb[x]*wb)
			}
		}
	}
}

// blendHoriz is blend_h: b's first e columns ← a's last e columns·(1−x/e) + b's columns·(x/e).
func blendHoriz(a, b *pixTile, planes, extent int) {
	e := min(a.w, b.w, extent)
	for x := 0; x < e; x++ {
		wa, wb := blendWeights(x, e)
		for p := 0; p < planes; p++ {
			for y := 0; y < b.h; y++ {
				ia := (p*a.h+y)*a.w + a.w - e + x
				ib := (p*b.h+y)*b.w + x
				b.data[ib] = float32(a.data[ia]*wa) + float32(b.data[ib]*wb)
			}
		}
	}
}
