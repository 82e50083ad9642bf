package fastvideo

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/metrics"
	"sync"
	"text/tabwriter"
	"time"
)

// Result is one finished generation. Large fields (Frames, Audio, Latents) are filled only when the
// request asked for them.
type Result struct {
	// OutputPath is the MP4 written (absolute), "" when the request set SkipSave.
	OutputPath string `json:"output_path,omitempty"`
	Prompt     string `json:"prompt"`
	// Seed is the seed the initial noise was drawn from (the request's, else the preset's), also
	// reported when Request.VideoNoise/AudioNoise replaced the draw.
	Seed int64 `json:"seed"`
	// PromptTokens is the prompt's exact token count (Wan: with the </s> the encoder sees; the DiT
	// attends to it zero-padded to 512 rows); PromptCached reports a prompt-cache hit (no tokenizer
	// or text encoder ran; Wan with guidance: for the negative prompt too).
	PromptTokens int  `json:"prompt_tokens"`
	PromptCached bool `json:"prompt_cached"`

	Width     int `json:"width"`
	Height    int `json:"height"`
	NumFrames int `json:"num_frames"`
	FPS       int `json:"fps"`
	// Frames holds NumFrames frames of Width·Height·3 bytes of packed RGB (rgb24, row-major, top row
	// first) when Request.ReturnFrames was set.
	Frames [][]byte `json:"-"`
	// Audio is the stereo waveform the audio VAE decoded (planar: Audio[0] left, Audio[1] right,
	// 800 samples per audio latent, in [-1, 1]) when Request.ReturnAudio was set. The MP4 carries it
	// cut to the video's duration, ceil(NumFrames/FPS·SampleRate) samples.
	Audio [][]float32 `json:"-"`
	// SampleRate is the audio track's rate (32000 for MiniMax H3); 0 for Wan, which generates video
	// only.
	SampleRate int `json:"sample_rate"`
	// Latents are the final denoised latents when Request.ReturnLatents was set.
	Latents *Latents `json:"-"`

	Timings Timings `json:"timings"`
	// PeakHostBytes is the largest memory the Go runtime held during the generation
	// (runtime/metrics /memory/classes/total:bytes, process-wide, sampled every 10 ms and at every
	// event). On the pure-Go backend weights and activations live there too; memory allocated outside
	// the Go runtime (XLA's and ffmpeg's) is not included.
	PeakHostBytes uint64 `json:"peak_host_bytes"`
	// PeakDeviceBytes is the accelerator's peak memory when the backend reports it, else -1;
	// DeviceMemory says which.
	PeakDeviceBytes int64  `json:"peak_device_bytes"`
	DeviceMemory    string `json:"device_memory"`
	Backend         string `json:"backend"`
	DType           DType  `json:"dtype"`

	// Plan is what ran (exact text rows).
	Plan *GenerationPlan `json:"plan"`
}

// Latents are the denoised latents of a generation in DiT space (before the VAEs' de-normalization).
type Latents struct {
	Video      []float32 `json:"-"` // [C][T][Hl][Wl]
	VideoShape []int     `json:"video_shape"`
	Audio      []float32 `json:"-"` // [2][C][N], stereo (MiniMax H3)
	AudioShape []int     `json:"audio_shape,omitempty"`
}

// Timings are the wall times of a generation's phases. VideoDecode includes encoding the frames
// (ffmpeg runs concurrently and is fed as clips are decoded); Mux is finishing the H.264 stream and
// muxing the audio. Component loads are part of the phase that needs them; LoadDiT also covers
// refining the prompt and the AdaLN tables. A phase that did not run is 0. In JSON the values are
// seconds.
type Timings struct {
	Validate    time.Duration
	Condition   time.Duration
	LoadDiT     time.Duration
	Denoise     time.Duration
	AudioDecode time.Duration
	VideoDecode time.Duration
	Mux         time.Duration
	Total       time.Duration
}

// MarshalJSON writes the timings in seconds under snake_case names.
func (t Timings) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]float64{
		"validate": t.Validate.Seconds(), "condition": t.Condition.Seconds(), "load_dit": t.LoadDiT.Seconds(),
		"denoise": t.Denoise.Seconds(), "audio_decode": t.AudioDecode.Seconds(),
		"video_decode": t.VideoDecode.Seconds(), "mux": t.Mux.Seconds(), "total": t.Total.Seconds(),
	})
}

// WriteSummary prints a short human-readable report of the result.
func (r *Result) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	if r.OutputPath != "" {
		row("output", "%s", r.OutputPath)
	}
	if r.SampleRate > 0 {
		row("video", "%dx%d (WxH), %d frames at %d fps, audio %d Hz stereo", r.Width, r.Height, r.NumFrames, r.FPS, r.SampleRate)
	} else {
		row("video", "%dx%d (WxH), %d frames at %d fps, no audio", r.Width, r.Height, r.NumFrames, r.FPS)
	}
	cached := ""
	if r.PromptCached {
		cached = " (prompt cache hit)"
	}
	row("prompt", "%d tokens%s, seed %d", r.PromptTokens, cached, r.Seed)
	t := r.Timings
	audio := ""
	if r.SampleRate > 0 {
		audio = ", audio decode " + secs(t.AudioDecode)
	}
	row("timings", "condition %s, load dit %s, denoise %s%s, video decode %s, mux %s; total %s",
		secs(t.Condition), secs(t.LoadDiT), secs(t.Denoise), audio, secs(t.VideoDecode), secs(t.Mux), secs(t.Total))
	dev := r.DeviceMemory
	if r.PeakDeviceBytes >= 0 {
		dev = fmt.Sprintf("%.2f GiB", float64(r.PeakDeviceBytes)/(1<<30))
	}
	row("memory", "peak host %.2f GiB; device: %s", float64(r.PeakHostBytes)/(1<<30), dev)
	row("backend", "%s, %s", r.Backend, r.DType)
	return tw.Flush()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

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
