package imageops

import (
	"fmt"
	"math"
)

// gaussShift is the fraction of OpenCV's bit-exact uint8 Gaussian: kernel taps are ufixedpoint16
// (8 fractional bits), a separable pass accumulates 16.
const gaussShift = 8

// GaussianKernelQ8 is the 1-D kernel cv::GaussianBlur(src, (0, 0), sigma) applies to uint8
// frames: size round(6*sigma+1)|1, taps exp(-x^2/(2 sigma^2)) normalized to sum 1
// (getGaussianKernelBitExact), then quantized to 1/256 with error diffusion from the outer taps
// inwards, the center taking what is left so the taps sum to exactly 256
// (getGaussianKernelFixedPoint_ED, smooth.dispatch.cpp). Sigma 1 gives [1 14 62 102 62 14 1].
func GaussianKernelQ8(sigma float64) ([]int32, error) {
	if !(sigma > 0) || sigma > 100 {
		return nil, fmt.Errorf("imageops: Gaussian sigma %v (want 0 < sigma <= 100)", sigma)
	}
	n := int(math.RoundToEven(sigma*3*2+1)) | 1
	half := n / 2
	scale := -0.125 / (sigma * sigma)
	vals := make([]float64, half)
	sum := 0.0
	for i, x := 0, 1-n; i < half; i, x = i+1, x+2 {
		vals[i] = math.Exp(float64(x*x) * scale)
		sum += vals[i]
	}
	mul := 1 / (2*sum + 1)
	k := make([]int32, n)
	err, total := 0.0, int32(0)
	for i := 0; i < half; i++ {
		adj := vals[i]*mul*(1<<gaussShift) + err
		v := int32(math.RoundToEven(adj))
		err = adj - float64(v)
		k[i], k[n-1-i] = v, v
		total += 2 * v
	}
	k[half] = 1<<gaussShift - total
	return k, nil
}

// reflect101 is BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba) of an index into [0, n).
func reflect101(i, n int) int {
	if n == 1 {
		return 0
	}
	for i < 0 || i >= n {
		if i < 0 {
			i = -i
		} else {
			i = 2*(n-1) - i
		}
	}
	return i
}

// GaussianBlur is cv::GaussianBlur(src, (0, 0), sigma) on a uint8 frame with BORDER_REFLECT_101:
// the bit-exact fixed-point path (GaussianBlurFixedPoint), exact integer sums of the Q8 taps along
// rows then columns, rounded once: (sum + 2^15) >> 16.
func GaussianBlur(src Image, sigma float64) (Image, error) {
	if err := src.check(); err != nil {
		return Image{}, err
	}
	k, err := GaussianKernelQ8(sigma)
	if err != nil {
		return Image{}, err
	}
	w, h, n := src.Width, src.Height, src.Width*Channels
	rows := make([]int32, h*n)
	for y := 0; y < h; y++ {
		blurRow(src.Pix[y*n:(y+1)*n], rows[y*n:(y+1)*n], k)
	}
	dst, half := NewImage(w, h), len(k)/2
	acc := make([]int32, n)
	for y := 0; y < h; y++ {
		clear(acc)
		for j, c := range k {
			r := rows[reflect101(y-half+j, h)*n:][:n]
			for i := range acc {
				acc[i] += c * r[i]
			}
		}
		drow := dst.Pix[y*n : (y+1)*n]
		for i, v := range acc {
			drow[i] = saturateU8((v + 1<<(2*gaussShift-1)) >> (2 * gaussShift))
		}
	}
	return dst, nil
}

// blurRow is the horizontal pass of GaussianBlur over one row (any channel count: each value's
// taps are Channels apart): reflected taps at the edges, the symmetric kernel folded inside.
func blurRow(row []byte, out []int32, k []int32) {
	n, half := len(row), len(k)/2
	tap := func(i, j int) int32 { // value i's tap j, reflected at the row's ends
		x := reflect101(i/Channels-half+j, n/Channels)
		return int32(row[x*Channels+i%Channels])
	}
	edge := min(half*Channels, n)
	for i := 0; i < n; i++ {
		if i == edge && n-edge > edge {
			i = n - edge // the interior is done below
		}
		var v int32
		for j, c := range k {
			v += c * tap(i, j)
		}
		out[i] = v
	}
	center := k[half]
	for i := edge; i < n-edge; i++ {
		v := center * int32(row[i])
		for d := 1; d <= half; d++ {
			v += k[half-d] * (int32(row[i-d*Channels]) + int32(row[i+d*Channels]))
		}
		out[i] = v
	}
}

// UnsharpSigma is the blur of upstream's unsharp pass (frame_upsample.unsharp).
const UnsharpSigma = 1.0

// Unsharp is upstream's unsharp mask (fastvideo/mlx_runtime/frame_upsample.py, unsharp):
// addWeighted(f, 1+amount, GaussianBlur(f, (0, 0), 1.0), -amount, 0), saturating to uint8. As
// cv::addWeighted does for uint8, the weights are float32 and the sum f*(1+a) + blur*(-a) is
// formed in float32 (fused, as its vector path does) and rounded half to even. An amount <= 0
// returns a copy of src.
func Unsharp(src Image, amount float64) (Image, error) {
	if err := src.check(); err != nil {
		return Image{}, err
	}
	if !(amount > 0) {
		if math.IsNaN(amount) {
			return Image{}, fmt.Errorf("imageops: unsharp amount NaN")
		}
		dst := NewImage(src.Width, src.Height)
		copy(dst.Pix, src.Pix)
		return dst, nil
	}
	blur, err := GaussianBlur(src, UnsharpSigma)
	if err != nil {
		return Image{}, err
	}
	alpha, beta := float64(float32(1+amount)), float64(float32(-amount))
	// Every (pixel, blurred) pair maps to one output: a 64 KiB table replaces the float math.
	var lut [256][256]byte
	for a := range 256 {
		for b := range 256 {
			inner := float64(float32(float64(b) * beta))
			v := float64(float32(float64(a)*alpha + inner))
			lut[a][b] = saturateU8(int32(max(-1, min(256, math.RoundToEven(v)))))
		}
	}
	for i, a := range src.Pix {
		blur.Pix[i] = lut[a][blur.Pix[i]]
	}
	return blur, nil
}
