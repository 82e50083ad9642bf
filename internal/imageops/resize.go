package imageops

import (
	"fmt"
	"math"
)

// coefBits is OpenCV's INTER_RESIZE_COEF_BITS: uint8 resizes weight taps in 11-bit fixed point,
// accumulate the horizontal pass in int and the vertical pass to 22 fractional bits.
const coefBits = 11

// Resize returns src resized to width x height as cv::resize(src, (width, height),
// interpolation) does on uint8 frames: pixel-center mapping (src = (dst+0.5)*scale - 0.5) with
// border replication for the linear, cubic and Lanczos kernels, floor(dst*scale) for nearest, the
// exact 2x linear reduction computed as INTER_AREA (2x2 means), and OpenCV's fixed-point taps.
func Resize(src Image, width, height int, mode Interpolation) (Image, error) {
	if err := src.check(); err != nil {
		return Image{}, err
	}
	if width <= 0 || height <= 0 {
		return Image{}, fmt.Errorf("imageops: resize to %dx%d", width, height)
	}
	dst := NewImage(width, height)
	switch {
	case width == src.Width && height == src.Height:
		copy(dst.Pix, src.Pix) // cv::resize copies a same-size frame
	case mode == Nearest:
		resizeNearest(src, dst)
	case mode == Bilinear && isHalf(src, dst):
		resizeHalf(src, dst)
	case mode == Cubic:
		resizeFloat(src, dst, mode)
	case mode == Bilinear || mode == Lanczos:
		resizeSeparable(src, dst, mode)
	default:
		return Image{}, fmt.Errorf("imageops: unknown interpolation %d", int(mode))
	}
	return dst, nil
}

// inverseScale is OpenCV's src/dst step: 1/(dst/src), in double, as cv::resize derives it.
func inverseScale(srcLen, dstLen int) float64 {
	return 1 / (float64(dstLen) / float64(srcLen))
}

// resizeNearest is resizeNN: source index floor(d*scale), capped at the last pixel.
func resizeNearest(src, dst Image) {
	fx, fy := inverseScale(src.Width, dst.Width), inverseScale(src.Height, dst.Height)
	xs := make([]int, dst.Width)
	for x := range xs {
		xs[x] = min(int(math.Floor(float64(x)*fx)), src.Width-1) * Channels
	}
	for y := 0; y < dst.Height; y++ {
		sy := min(int(math.Floor(float64(y)*fy)), src.Height-1)
		srow := src.Pix[sy*src.Width*Channels : (sy+1)*src.Width*Channels]
		drow := dst.Pix[y*dst.Width*Channels : (y+1)*dst.Width*Channels]
		for x, sx := range xs {
			copy(drow[x*Channels:x*Channels+Channels], srow[sx:sx+Channels])
		}
	}
}

// isHalf reports an exact 2x reduction on both axes, which cv::resize computes as INTER_AREA for
// INTER_LINEAR ("in case of scale_x && scale_y is equal to 2, INTER_AREA (fast) also is equal to
// INTER_LINEAR").
func isHalf(src, dst Image) bool {
	sx, sy := inverseScale(src.Width, dst.Width), inverseScale(src.Height, dst.Height)
	return math.Abs(sx-2) < 0x1p-52 && math.Abs(sy-2) < 0x1p-52
}

// resizeHalf is resizeAreaFast for a 2x2 cell: the rounded mean (a+b+c+d+2)>>2.
func resizeHalf(src, dst Image) {
	sstride := src.Width * Channels
	for y := 0; y < dst.Height; y++ {
		r0 := src.Pix[2*y*sstride:]
		r1 := src.Pix[(2*y+1)*sstride:]
		drow := dst.Pix[y*dst.Width*Channels : (y+1)*dst.Width*Channels]
		for x := 0; x < dst.Width; x++ {
			for c := 0; c < Channels; c++ {
				i := 2*x*Channels + c
				sum := int(r0[i]) + int(r0[i+Channels]) + int(r1[i]) + int(r1[i+Channels])
				drow[x*Channels+c] = byte((sum + 2) >> 2)
			}
		}
	}
}

// taps are one axis of a separable resize: for each destination index, ksize source indices
// (border-replicated) and their weights, in float and in fixed point.
type taps struct {
	ksize  int
	index  []int     // len(dst)*ksize
	weight []float32 // len(dst)*ksize
	coef   []int32   // weight in coefBits fixed point
}

// planTaps computes an axis's taps as cv::resize does (resize.cpp, the xofs/ialpha and
// yofs/ibeta loops): the source position in float, the kernel weights in float, each weight
// rounded to 11-bit fixed point on its own (so they need not sum to exactly 2048). On the x axis
// the linear kernel pins positions outside the image to the edge pixel (fx = 0); on the y axis
// it does not, and only the row indices are replicated.
func planTaps(mode Interpolation, srcLen, dstLen int, xAxis bool) taps {
	k := map[Interpolation]int{Bilinear: 2, Cubic: 4, Lanczos: 8}[mode]
	t := taps{ksize: k, index: make([]int, dstLen*k), weight: make([]float32, dstLen*k), coef: make([]int32, dstLen*k)}
	scale := inverseScale(srcLen, dstLen)
	var w [8]float32
	for d := 0; d < dstLen; d++ {
		f := float32((float64(d)+0.5)*scale - 0.5)
		s := int(math.Floor(float64(f)))
		f -= float32(s)
		switch mode {
		case Cubic:
			cubicWeights(f, w[:4])
		case Lanczos:
			lanczos4Weights(f, &w)
		default:
			if xAxis && s < 0 {
				f, s = 0, 0
			}
			if xAxis && s >= srcLen-1 {
				f, s = 0, srcLen-1
			}
			w[0], w[1] = 1-f, f
		}
		for j := 0; j < k; j++ {
			t.index[d*k+j] = clampIndex(s-k/2+1+j, srcLen)
			t.weight[d*k+j] = w[j]
			t.coef[d*k+j] = fixedCoef(w[j])
		}
	}
	return t
}

// fixedCoef is saturate_cast<short>(w * INTER_RESIZE_COEF_SCALE): round half to even.
func fixedCoef(w float32) int32 {
	v := math.RoundToEven(float64(float32(w * (1 << coefBits))))
	return int32(max(math.MinInt16, min(math.MaxInt16, v)))
}

// cubicWeights is interpolateCubic (A = -0.75), in float with every product rounded as C++ does
// without contraction.
func cubicWeights(x float32, w []float32) {
	const a float32 = -0.75
	x1, x2 := x+1, 1-x
	w[0] = float32(float32(float32(float32(a*x1)-5*a)*x1)+8*a)*x1 - 4*a
	w[1] = float32(float32(float32(float32((a+2)*x)-(a+3))*x)*x) + 1
	w[2] = float32(float32(float32(float32((a+2)*x2)-(a+3))*x2)*x2) + 1
	w[3] = 1 - w[0] - w[1] - w[2]
}

// lanczos4Weights is interpolateLanczos4: sin(pi*d)sin(pi*d/4)/(pi*d/4)^2 through the
// angle-addition table, in double, stored as float and normalized to sum 1 in float; a tap at
// distance below 1e-6 gets 1e30 so the normalization makes it the only one.
func lanczos4Weights(x float32, w *[8]float32) {
	const s45 = 0.70710678118654752440084436210485
	cs := [8][2]float64{{1, 0}, {-s45, -s45}, {0, 1}, {s45, -s45}, {-1, 0}, {s45, s45}, {0, -1}, {-s45, s45}}
	y0 := -float64(x+3) * math.Pi * 0.25
	s0, c0 := math.Sin(y0), math.Cos(y0)
	var sum float32
	for i := range w {
		d := x + 3 - float32(i)
		if math.Abs(float64(d)) >= float64(float32(1e-6)) {
			y := -float64(d) * math.Pi * 0.25
			w[i] = float32((float64(cs[i][0]*s0) + float64(cs[i][1]*c0)) / float64(y*y))
		} else {
			w[i] = 1e30
		}
		sum += w[i]
	}
	inv := 1 / sum
	for i := range w {
		w[i] *= inv
	}
}

// resizeSeparable is resizeGeneric_ for uint8 in fixed point: every source row through the horizontal taps
// (exact int sums), then each destination row as the weighted sum of ksize of those rows.
func resizeSeparable(src, dst Image, mode Interpolation) {
	xt := planTaps(mode, src.Width, dst.Width, true)
	yt := planTaps(mode, src.Height, dst.Height, false)
	n := dst.Width * Channels
	rows := make([]int32, src.Height*n)
	for y := 0; y < src.Height; y++ {
		horizontalPass(src.Pix[y*src.Width*Channels:(y+1)*src.Width*Channels], rows[y*n:(y+1)*n], xt)
	}
	acc := make([]int32, n)
	for y := 0; y < dst.Height; y++ {
		drow := dst.Pix[y*n : (y+1)*n]
		idx, coef := yt.index[y*yt.ksize:(y+1)*yt.ksize], yt.coef[y*yt.ksize:(y+1)*yt.ksize]
		if mode == Bilinear {
			verticalLinear(rows[idx[0]*n:(idx[0]+1)*n], rows[idx[1]*n:(idx[1]+1)*n], coef[0], coef[1], drow)
			continue
		}
		clear(acc)
		for j, sy := range idx {
			b, r := coef[j], rows[sy*n:(sy+1)*n]
			for i := range acc {
				acc[i] += r[i] * b
			}
		}
		for i, v := range acc {
			drow[i] = saturateU8((v + 1<<(2*coefBits-1)) >> (2 * coefBits))
		}
	}
}

// horizontalPass resamples one source row: out[x*3+c] = sum_j S[index_j*3+c]*coef_j.
func horizontalPass(row []byte, out []int32, t taps) {
	k := t.ksize
	for d := 0; d < len(out)/Channels; d++ {
		var r, g, b int32
		idx, coef := t.index[d*k:(d+1)*k], t.coef[d*k:(d+1)*k]
		for j, s := range idx {
			p := row[s*Channels : s*Channels+Channels]
			c := coef[j]
			r += int32(p[0]) * c
			g += int32(p[1]) * c
			b += int32(p[2]) * c
		}
		out[d*Channels], out[d*Channels+1], out[d*Channels+2] = r, g, b
	}
}

// verticalLinear is VResizeLinearVec_32s8u, the vector path OpenCV takes for uint8 rows:
// ((S0>>4)*b0>>16) + ((S1>>4)*b1>>16), then a rounding shift by 2 (v_mul_hi, v_rshr_pack_u<2>).
func verticalLinear(s0, s1 []int32, b0, b1 int32, out []byte) {
	for i := range out {
		v := (s0[i]>>4)*b0>>16 + (s1[i]>>4)*b1>>16
		out[i] = saturateU8((v + 2) >> 2)
	}
}

// resizeFloat evaluates the taps in float32, rounding once at the end (saturate_cast<uchar>:
// half to even). OpenCV 5.0's uint8 INTER_CUBIC behaves like this, not like the 11-bit fixed
// point of its linear and Lanczos kernels: over the cubic cases of testdata/frame_resize*.json
// (218k values, cv2 5.0.0) the float evaluation differs on 16 values by 1 LSB, the fixed-point
// one on 890.
func resizeFloat(src, dst Image, mode Interpolation) {
	xt := planTaps(mode, src.Width, dst.Width, true)
	yt := planTaps(mode, src.Height, dst.Height, false)
	n, k := dst.Width*Channels, xt.ksize
	rows := make([]float32, src.Height*n)
	for y := 0; y < src.Height; y++ {
		row, out := src.Pix[y*src.Width*Channels:(y+1)*src.Width*Channels], rows[y*n:(y+1)*n]
		for d := 0; d < dst.Width; d++ {
			var r, g, b float32
			for j, s := range xt.index[d*k : (d+1)*k] {
				p, w := row[s*Channels:s*Channels+Channels], xt.weight[d*k+j]
				r += float32(float32(p[0]) * w)
				g += float32(float32(p[1]) * w)
				b += float32(float32(p[2]) * w)
			}
			out[d*Channels], out[d*Channels+1], out[d*Channels+2] = r, g, b
		}
	}
	acc := make([]float32, n)
	for y := 0; y < dst.Height; y++ {
		clear(acc)
		for j, sy := range yt.index[y*k : (y+1)*k] {
			w, r := yt.weight[y*k+j], rows[sy*n:(sy+1)*n]
			for i := range acc {
				acc[i] += float32(r[i] * w)
			}
		}
		drow := dst.Pix[y*n : (y+1)*n]
		for i, v := range acc {
			drow[i] = saturateU8(int32(max(-1, min(256, math.RoundToEven(float64(v))))))
		}
	}
}
