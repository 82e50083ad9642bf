package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gomlx/compute"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
	"fastvideo/vae/h3audio"
)

var (
	audioFrames = flag.Int("audio-frames", 207, "h3audio: latent frames per channel (207 = 124 video frames, 5.175 s)")
	audioDump   = flag.String("audio-dump", "", "h3audio: folder to write the random weights (h3audio_weights.safetensors) and the latents and waveform (h3audio_io.safetensors) for bench/h3_audio_vae_torch.py --load")
	audioGScale = flag.Float64("audio-post-gain", 0.05, "h3audio: weight-norm gain of conv_post, so random weights give a waveform mostly inside [-1, 1] (a clipped output would hide differences)")
)

func init() {
	register("h3audio", func(b compute.Backend, c common) error {
		return benchH3AudioVAE(b, *audioFrames, c.Warmup, c.Iters, c.Seed)
	})
}

// randomAudioVAE fills the released audio-VAE tensor table with random values
// of the fixture generator's scales (weight-norm g 1+0.1·randn, v randn/√fan_in,
// biases 0.05·randn, SnakeBeta log-α/β 0.1·randn) and the real kaiser-sinc
// filters, so the waveform stays finite and in range like a trained model's.
func randomAudioVAE(cfg h3audio.Config, seed uint64, postGain float64) (weights.MapSource, error) {
	list, err := h3audio.Params(cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x4833617564696f))
	filter := h3audio.KaiserSincFilter(0.25, 0.3, 12)
	src := weights.MapSource{}
	for _, ts := range list {
		n := 1
		for _, d := range ts.Shape {
			n *= d
		}
		v := make([]float32, n)
		switch {
		case strings.HasSuffix(ts.Name, ".filter"):
			if n != len(filter) {
				return nil, fmt.Errorf("%s has %d taps, the filter has %d", ts.Name, n, len(filter))
			}
			copy(v, filter)
		case ts.Name == "decoder.conv_post.weight_g":
			v[0] = float32(postGain)
		case strings.HasSuffix(ts.Name, ".weight_g"):
			for i := range v {
				v[i] = float32(1 + 0.1*r.NormFloat64())
			}
		case strings.HasSuffix(ts.Name, ".bias"):
			for i := range v {
				v[i] = float32(0.05 * r.NormFloat64())
			}
		case strings.HasSuffix(ts.Name, ".act.alpha"), strings.HasSuffix(ts.Name, ".act.beta"):
			for i := range v {
				v[i] = float32(0.1 * r.NormFloat64())
			}
		default: // conv weights (weight_v or plain)
			s := 1 / math.Sqrt(float64(n/ts.Shape[0]))
			for i := range v {
				v[i] = float32(s * r.NormFloat64())
			}
		}
		src[ts.Name] = safetensors.Info{Name: ts.Name, DType: safetensors.F32, Shape: ts.Shape, Data: safetensors.F32Bytes(v)}
	}
	return src, nil
}

// decoderGFLOP counts the decoder's multiply-adds (×2) for b items of n
// latents; the anti-aliased activations and elementwise work are left out.
func decoderGFLOP(cfg h3audio.Config, b, n int) float64 {
	f := 2.0 * float64(b*n) * float64(cfg.LatentChannels*cfg.LatentDim+cfg.LatentDim*cfg.DecoderDim*7)
	c, l := cfg.DecoderDim, n
	for i, rate := range cfg.DecoderRates {
		f += 2 * float64(b*l) * float64(c*(c/2)*cfg.DecoderKernelSizes[i])
		c /= 2
		l *= rate
		for j, k := range cfg.ResblockKernelSizes {
			f += float64(2*len(cfg.ResblockDilationSizes[j])) * 2 * float64(b*l) * float64(c*c*k)
		}
	}
	f += 2 * float64(b*l) * float64(c*7)
	return f / 1e9
}

// benchH3AudioVAE times the release-size audio decoder: random weights bound
// on the backend, stereo latents [2, 32, frames] -> 2 × 800·frames samples.
func benchH3AudioVAE(b compute.Backend, frames, warmup, iters int, seed uint64) error {
	if frames <= 0 || iters <= 0 {
		return badFlag("h3audio bench: -audio-frames (%d) and -iters (%d) must be positive", frames, iters)
	}
	cfg := h3audio.DefaultConfig()
	src, err := randomAudioBenchWeights(cfg, seed)
	if err != nil {
		return err
	}
	// Device memory from nvidia-smi (this process), polled by h3vae.go's helper, from the upload on.
	gpuPeak := startGPUPeak()
	t0 := time.Now()
	dec, err := h3audio.FromSource(b, cfg, src, h3audio.Options{})
	if err != nil {
		return err
	}
	defer dec.Close()
	fmt.Printf("h3audio: bind+upload %.3f s\n", time.Since(t0).Seconds())

	z, shape := audioBenchLatents(cfg, frames, seed)
	out, times, err := timeAudioDecodes(dec, z, shape, warmup, iters)
	if err != nil {
		return err
	}
	reportAudioDecodes(cfg, frames, out, times, gpuPeak.Stop())
	if *audioDump != "" {
		return dumpAudioBench(*audioDump, src, z, shape, out)
	}
	return nil
}

// randomAudioBenchWeights draws the decoder's random weights and prints their size.
func randomAudioBenchWeights(cfg h3audio.Config, seed uint64) (weights.MapSource, error) {
	t0 := time.Now()
	src, err := randomAudioVAE(cfg, seed, *audioGScale)
	if err != nil {
		return nil, err
	}
	var bytes int
	for _, info := range src {
		bytes += len(info.Data)
	}
	fmt.Printf("h3audio: release config, decoder weights %.1f MB f32 (random, generated in %.2f s)\n",
		float64(bytes)/1e6, time.Since(t0).Seconds())
	return src, nil
}

// audioBenchLatents draws stereo latents [2, channels, frames].
func audioBenchLatents(cfg h3audio.Config, frames int, seed uint64) ([]float32, []int) {
	r := rand.New(rand.NewPCG(seed, 1))
	shape := []int{2, cfg.LatentChannels, frames}
	z := make([]float32, 2*cfg.LatentChannels*frames)
	for i := range z {
		z[i] = float32(r.NormFloat64())
	}
	return z, shape
}

// timeAudioDecodes runs one decode (compilation included, reported), warmup untimed ones and iters
// timed ones; it returns the last output and the timed durations in seconds.
func timeAudioDecodes(dec *h3audio.Decoder, z []float32, shape []int, warmup, iters int) ([][]float32, []float64, error) {
	ctx := context.Background()
	t0 := time.Now()
	out, err := dec.Decode(ctx, z, shape)
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("h3audio: first decode (compile + run) %.3f s\n", time.Since(t0).Seconds())
	for range warmup {
		if _, err := dec.Decode(ctx, z, shape); err != nil {
			return nil, nil, err
		}
	}
	times := make([]float64, iters)
	for i := range times {
		t0 = time.Now()
		if out, err = dec.Decode(ctx, z, shape); err != nil {
			return nil, nil, err
		}
		times[i] = time.Since(t0).Seconds()
	}
	return out, times, nil
}

// reportAudioDecodes prints the timings, the throughput, the memory peaks and the waveform's statistics.
func reportAudioDecodes(cfg h3audio.Config, frames int, out [][]float32, times []float64, gpuPeakMiB int) {
	iters := len(times)
	sorted := slices.Clone(times)
	sort.Float64s(sorted)
	med := sorted[len(sorted)/2]
	var sum float64
	for _, t := range times {
		sum += t
	}
	samples := len(out[0])
	seconds := float64(samples) / float64(cfg.SamplingRate)
	gflop := decoderGFLOP(cfg, 2, frames)
	fmt.Printf("h3audio: %d latents -> 2 x %d samples (%.3f s of audio at %d Hz)\n", frames, samples, seconds, cfg.SamplingRate)
	fmt.Printf("h3audio: decode min %.2f ms, median %.2f ms, mean %.2f ms over %d runs (end to end: host latents -> host PCM)\n",
		sorted[0]*1e3, med*1e3, sum/float64(iters)*1e3, iters)
	fmt.Printf("h3audio: %.0f GFLOP per decode -> %.1f TFLOP/s at the median; %.0fx real time\n",
		gflop, gflop/med/1e3, seconds/med)
	fmt.Printf("h3audio: peak device memory of the process %d MiB (nvidia-smi; -1 = unavailable), host peak RSS %d MiB\n",
		gpuPeakMiB, hostPeakMiB(false))
	rms, peak, clipped, nonFinite := waveformStats(out)
	fmt.Printf("h3audio: output rms %.4f, peak %.4f, clipped %d, non-finite %d\n", rms, peak, clipped, nonFinite)
}

// waveformStats is the rms (over every sample, finite or not) and peak of the finite samples, and the
// counts of samples at ±1 and of non-finite ones.
func waveformStats(out [][]float32) (rms float64, peak float32, clipped, nonFinite int) {
	var sq float64
	for _, ch := range out {
		for _, v := range ch {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				nonFinite++
				continue
			}
			sq += float64(v) * float64(v)
			peak = max(peak, float32(math.Abs(float64(v))))
			if v == 1 || v == -1 {
				clipped++
			}
		}
	}
	return math.Sqrt(sq / float64(2*len(out[0]))), peak, clipped, nonFinite
}

// dumpAudioBench writes what the PyTorch script needs to run the same decode
// and compare: the weights under released names, the latents and Go's waveform.
func dumpAudioBench(dir string, src weights.MapSource, z []float32, shape []int, out [][]float32) error {
	var ts []safetensors.Tensor
	for _, n := range src.Names() {
		i := src[n]
		ts = append(ts, safetensors.Tensor{Name: n, DType: i.DType, Shape: i.Shape, Data: i.Data})
	}
	wpath := filepath.Join(dir, "h3audio_weights.safetensors")
	if err := safetensors.WriteFile(wpath, ts, nil); err != nil {
		return err
	}
	var wave []float32
	for _, ch := range out {
		wave = append(wave, ch...)
	}
	iopath := filepath.Join(dir, "h3audio_io.safetensors")
	err := safetensors.WriteFile(iopath, []safetensors.Tensor{
		{Name: "latents", DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(z)},
		{Name: "wave", DType: safetensors.F32, Shape: []int{len(out), 1, len(out[0])}, Data: safetensors.F32Bytes(wave)},
	}, nil)
	if err != nil {
		return err
	}
	fmt.Printf("h3audio: wrote %s and %s\n", wpath, iopath)
	return nil
}
