package media

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"fastvideo/internal/testutil"
)

const (
	testW, testH = 64, 48
	testFrames   = 24
	testFPS      = 24.0
	testRate     = 32000
	aacFrameSecs = 1024.0 / testRate
	// 8-bit levels: CRF 18 quantization plus limited-range YCbCr rounding on flat regions
	// (measured 1.72); a BT.601/BT.709 matrix mix-up shows up as ~17.
	maxMeanErrRGB = 2.5
)

// requireTools finds ffmpeg and ffprobe as the SDK does ($FASTVIDEO_FFMPEG, $FASTVIDEO_FFPROBE,
// else PATH). It skips when ffmpeg is simply not installed on a developer machine; in CI
// (CI=true) ffmpeg is installed, so its absence is a failure, as is a broken ffmpeg anywhere.
func requireTools(t *testing.T) Tools {
	t.Helper()
	tools, err := FindTools(os.Getenv(EnvFFmpeg), os.Getenv(EnvFFprobe))
	if err == nil {
		return tools
	}
	if errors.Is(err, ErrNotFound) && os.Getenv(EnvFFmpeg) == "" && os.Getenv("CI") != "true" {
		t.Skipf("ffmpeg not installed, skipping (apt-get install ffmpeg to run; with CI=true this fails): %v", err)
	}
	t.Fatalf("ffmpeg unusable: %v", err)
	return Tools{}
}

// quadrantColors gives each frame four distinct flat quadrants (TL, TR, BL, BR) that change
// per frame, so a decode round trip catches channel order, orientation and frame order.
func quadrantColors(frame int) [4][3]byte {
	var q [4][3]byte
	for k := range q {
		for c := range 3 {
			q[k][c] = byte(30 + (frame*7+k*53+c*89)%190)
		}
	}
	return q
}

func makeFrame(frame int) []byte {
	q := quadrantColors(frame)
	rgb := make([]byte, testW*testH*3)
	for y := range testH {
		for x := range testW {
			k := 0
			if x >= testW/2 {
				k++
			}
			if y >= testH/2 {
				k += 2
			}
			copy(rgb[(y*testW+x)*3:], q[k][:])
		}
	}
	return rgb
}

func sineAudio(seconds float64) [][]float32 {
	n := int(seconds * testRate)
	l, r := make([]float32, n), make([]float32, n)
	for i := range n {
		tt := float64(i) / testRate
		l[i] = float32(0.5 * math.Sin(2*math.Pi*440*tt))
		r[i] = float32(0.5 * math.Sin(2*math.Pi*660*tt))
	}
	return [][]float32{l, r}
}

func assertDir(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := testutil.DirNames(t, dir)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("directory %s holds %q, want exactly %q", dir, got, want)
	}
}

func writeClip(t *testing.T, tools Tools, opts MP4Options) {
	t.Helper()
	if err := writeFrames(t, tools, opts, testFrames); err != nil {
		t.Fatal(err)
	}
}

// writeFrames writes n test frames through a new writer and returns the error of Close, for the
// tests that expect it to fail; a failure before Close fails the test.
func writeFrames(t *testing.T, tools Tools, opts MP4Options, n int) error {
	t.Helper()
	w, err := tools.NewMP4Writer(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for i := range n {
		if err := w.WriteFrame(makeFrame(i)); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	return w.Close()
}

// withAudio gives o a stereo track of secs seconds at testRate, for a file of testFrames frames.
func withAudio(o MP4Options, secs float64) MP4Options {
	o.AudioSampleRate, o.Audio, o.Frames = testRate, sineAudio(secs), testFrames
	return o
}

// checkPixels decodes the file back to rgb24 and compares the mean of each quadrant's
// interior (away from edges, where chroma subsampling and DCT ringing blend colors).
func checkPixels(t *testing.T, ff, path string) {
	t.Helper()
	// Accurate swscale flags: ffmpeg's default YUV->RGB path alone is off by ~3 levels.
	cmd := exec.Command(ff, "-hide_banner", "-nostdin", "-v", "error", "-i", "file:"+path,
		"-vf", "scale=flags=accurate_rnd+full_chroma_int", "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("decoding %s: %v\n%s", path, err, stderr.String())
	}
	size := testW * testH * 3
	if out.Len() != testFrames*size {
		t.Fatalf("decoded %d bytes, want %d frames of %d", out.Len(), testFrames, size)
	}
	worst, worstAt := 0.0, ""
	for f := range testFrames {
		rgb := out.Bytes()[f*size : (f+1)*size]
		want := quadrantColors(f)
		for k := range 4 {
			x0, y0 := (k%2)*testW/2, (k/2)*testH/2
			var sum [3]float64
			n := 0
			for y := y0 + 4; y < y0+testH/2-4; y++ {
				for x := x0 + 4; x < x0+testW/2-4; x++ {
					for c := range 3 {
						sum[c] += float64(rgb[(y*testW+x)*3+c])
					}
					n++
				}
			}
			for c := range 3 {
				d := math.Abs(sum[c]/float64(n) - float64(want[k][c]))
				if d > worst {
					worst, worstAt = d, fmt.Sprintf("frame %d quadrant %d channel %d", f, k, c)
				}
			}
		}
	}
	t.Logf("decoded quadrant means: max abs error %.3f levels at %s", worst, worstAt)
	if worst > maxMeanErrRGB {
		t.Errorf("decoded colors off by %.3f levels at %s, tolerance %v", worst, worstAt, maxMeanErrRGB)
	}
}

func TestWriteMP4WithAudio(t *testing.T) {
	tools := requireTools(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "out.mp4")
	o := withAudio(MP4Options{Path: path, Width: testW, Height: testH, FPS: testFPS, AudioChannels: 2}, 1)
	writeClip(t, tools, o)
	assertDir(t, dir, "out.mp4")

	info, err := tools.Probe(path)
	if err != nil {
		t.Fatal(err)
	}
	v, a := info.Video, info.Audio
	if v == nil || a == nil {
		t.Fatalf("probe: video %+v audio %+v, want both", v, a)
	}
	t.Logf("video %+v", *v)
	t.Logf("audio %+v", *a)
	if v.Codec != "h264" || v.PixelFormat != "yuv420p" || v.Width != testW || v.Height != testH ||
		v.Frames != testFrames || v.FPS != testFPS || v.ColorSpace != "bt709" || v.ColorRange != "tv" {
		t.Errorf("video stream %+v, want h264 yuv420p %dx%d, %d frames at %v fps, bt709 tv", *v, testW, testH, testFrames, testFPS)
	}
	if a.Codec != "aac" || a.Channels != 2 || a.SampleRate != testRate {
		t.Errorf("audio stream %+v, want aac, 2 channels, %d Hz", *a, testRate)
	}
	if d := math.Abs(a.Duration - v.Duration); d > aacFrameSecs {
		t.Errorf("audio lasts %.4f s, video %.4f s: differ by %.4f s, more than one AAC frame (%.4f s)", a.Duration, v.Duration, d, aacFrameSecs)
	}
	if want := testFrames / testFPS; math.Abs(a.Duration-want) > aacFrameSecs {
		t.Errorf("audio lasts %.4f s, want the %d frames' %.4f s within one AAC frame", a.Duration, testFrames, want)
	}
	// The sines' RMS is 0.5/sqrt(2) per channel; a silent or scrambled track is far from it.
	if rms := decodedAudioRMS(t, tools.FFmpeg, path); math.Abs(rms[0]-0.3536) > 0.02 || math.Abs(rms[1]-0.3536) > 0.02 {
		t.Errorf("decoded audio RMS %.4f, want 0.3536 per channel", rms)
	}
	checkPixels(t, tools.FFmpeg, path)
}

// decodedAudioRMS decodes the file's audio track to stereo float32 and returns each channel's RMS.
func decodedAudioRMS(t *testing.T, ff, path string) [2]float64 {
	t.Helper()
	cmd := exec.Command(ff, "-hide_banner", "-nostdin", "-v", "error", "-i", "file:"+path, "-map", "0:a:0", "-f", "f32le", "-ac", "2", "pipe:1")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("decoding the audio of %s: %v\n%s", path, err, stderr.String())
	}
	b := out.Bytes()
	var sum [2]float64
	n := len(b) / 8
	for i := range n {
		for c := range 2 {
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i*8+c*4:])))
			sum[c] += v * v
		}
	}
	if n == 0 {
		t.Fatalf("%s has no audio samples", path)
	}
	return [2]float64{math.Sqrt(sum[0] / float64(n)), math.Sqrt(sum[1] / float64(n))}
}

// TestAudioLengthMismatch: audio shorter or longer than the video is fitted to it, so no
// frame is dropped and the audio track ends with the video.
func TestAudioLengthMismatch(t *testing.T) {
	tools := requireTools(t)
	for _, secs := range []float64{0.5, 1.7} {
		t.Run(fmt.Sprintf("%gs", secs), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.mp4")
			writeClip(t, tools, withAudio(MP4Options{Path: path, Width: testW, Height: testH, FPS: testFPS}, secs))
			info, err := tools.Probe(path)
			if err != nil {
				t.Fatal(err)
			}
			if info.Video == nil || info.Audio == nil || info.Video.Frames != testFrames {
				t.Fatalf("probe %+v / %+v, want %d frames and audio", info.Video, info.Audio, testFrames)
			}
			if d := math.Abs(info.Audio.Duration - info.Video.Duration); d > aacFrameSecs {
				t.Errorf("%g s of audio: muxed audio lasts %.4f s, video %.4f s (differ by more than one AAC frame)", secs, info.Audio.Duration, info.Video.Duration)
			}
		})
	}
}

func TestWriteMP4VideoOnly(t *testing.T) {
	tools := requireTools(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "wan.mp4")
	// An NTSC rate checks that a float FPS reaches the container as the exact rational.
	writeClip(t, tools, MP4Options{Path: path, Width: testW, Height: testH, FPS: 24000.0 / 1001})
	assertDir(t, dir, "wan.mp4")
	info, err := tools.Probe(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Audio != nil {
		t.Errorf("video-only file has an audio stream %+v", *info.Audio)
	}
	v := info.Video
	if v == nil || v.Codec != "h264" || v.PixelFormat != "yuv420p" || v.Width != testW || v.Height != testH ||
		v.Frames != testFrames || v.FrameRate != "24000/1001" {
		t.Fatalf("video stream %+v, want h264 yuv420p %dx%d, %d frames at 24000/1001", v, testW, testH, testFrames)
	}
	checkPixels(t, tools.FFmpeg, path)
}

func TestCancel(t *testing.T) {
	tools := requireTools(t)
	// cancelled starts a writer in a fresh folder, writes half the frames and cancels its context with
	// cause (nil: context.Canceled).
	cancelled := func(t *testing.T, cause error) (w *MP4Writer, dir string) {
		dir = t.TempDir()
		ctx, cancel := context.WithCancelCause(context.Background())
		o := withAudio(MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS}, 1)
		w, err := tools.NewMP4Writer(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for i := range testFrames / 2 {
			if err := w.WriteFrame(makeFrame(i)); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
		cancel(cause)
		return w, dir
	}
	t.Run("WriteFrame", func(t *testing.T) {
		w, dir := cancelled(t, nil)
		err := w.WriteFrame(makeFrame(0))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WriteFrame after cancel: %v, want context.Canceled", err)
		}
		if err2 := w.Close(); !errors.Is(err2, context.Canceled) {
			t.Errorf("Close after cancel: %v, want context.Canceled", err2)
		}
		assertDir(t, dir)
	})
	t.Run("Close", func(t *testing.T) {
		w, dir := cancelled(t, nil)
		if err := w.Close(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Close after cancel: %v, want context.Canceled", err)
		}
		assertDir(t, dir)
	})
	t.Run("NoFurtherCall", func(t *testing.T) {
		// Cancellation alone must clean up; Abort only waits for that cleanup here.
		w, dir := cancelled(t, errors.New("user pressed stop"))
		w.Abort()
		err := w.Close()
		if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrAborted) {
			t.Errorf("Close after cancel: %v, want context.Canceled or ErrAborted", err)
		}
		assertDir(t, dir)
	})
}

func TestFFmpegFailure(t *testing.T) {
	tools := requireTools(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "out.mp4")
	// A previous result at the target must survive a failed encode untouched.
	if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := withAudio(MP4Options{Path: path, Width: testW, Height: testH, FPS: testFPS}, 1)
	o.extraVideoArgs = []string{"-preset", "fastvideo_no_such_preset"}
	w, err := tools.NewMP4Writer(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// ffmpeg opens the encoder on the first frame, so the failure surfaces at some WriteFrame
	// (broken pipe) or at Close (exit status), depending on timing; both must report it.
	for i := range testFrames {
		if err = w.WriteFrame(makeFrame(i)); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		t.Fatal("encode with an invalid libx264 preset succeeded")
	}
	t.Logf("error: %v", err)
	var fe *FFmpegError
	if !errors.As(err, &fe) {
		t.Fatalf("error %T is not *FFmpegError", err)
	}
	if !strings.Contains(err.Error(), "fastvideo_no_such_preset") || !strings.Contains(fe.Stderr, "invalid preset") {
		t.Errorf("error does not carry ffmpeg's stderr tail naming the bad preset: %v", err)
	}
	assertDir(t, dir, "out.mp4")
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Errorf("target overwritten by a failed encode: %q", b)
	}
}

func TestFindTools(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-ffmpeg")
	_, err := FindTools(missing, "")
	if err == nil || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), EnvFFmpeg) || !strings.Contains(err.Error(), missing) {
		t.Errorf("FindTools(%s): %v, want ErrNotFound naming the variable and path", missing, err)
	}
	if (Tools{FFmpeg: missing}).Check() == nil {
		t.Error("Check succeeded with a missing ffmpeg")
	}
	if (Tools{}).Check() == nil {
		t.Error("Check succeeded without an ffmpeg")
	}
	out := filepath.Join(dir, "out.mp4")
	if _, err := (Tools{FFmpeg: missing}).NewMP4Writer(context.Background(), MP4Options{Path: out, Width: testW, Height: testH, FPS: testFPS}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("NewMP4Writer with a missing ffmpeg: %v, want an error naming %s", err, missing)
	}
	assertDir(t, dir)

	if _, err := FindTools(dir, ""); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("FindTools with ffmpeg %s, a directory: %v, want 'not an executable'", dir, err)
	}

	ff := fakeFFmpeg(t, "libx264", "aac")
	if _, err := FindTools(ff, missing); err == nil || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), EnvFFprobe) {
		t.Errorf("FindTools with ffprobe %s: %v, want ErrNotFound naming the variable", missing, err)
	}
	if err := os.WriteFile(out, []byte("not probed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (Tools{FFmpeg: ff}).Probe(out); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), EnvFFprobe) {
		t.Errorf("Probe without an ffprobe: %v, want ErrNotFound naming %s", err, EnvFFprobe)
	}
}

func TestOptionsValidation(t *testing.T) {
	var tools Tools // options are checked before ffmpeg: none is needed
	dir := t.TempDir()
	good := MP4Options{Path: filepath.Join(dir, "a.mp4"), Width: testW, Height: testH, FPS: testFPS}
	cases := []struct {
		name string
		edit func(*MP4Options)
		want string
	}{
		{"OddWidth", func(o *MP4Options) { o.Width = 63 }, "MP4Options.Width=63 is odd"},
		{"OddHeight", func(o *MP4Options) { o.Height = 47 }, "MP4Options.Height=47 is odd"},
		{"ZeroWidth", func(o *MP4Options) { o.Width = 0 }, "MP4Options.Width=0 must be in 1..16384"},
		{"HugeHeight", func(o *MP4Options) { o.Height = 1 << 40 }, "MP4Options.Height=1099511627776 must be in 1..16384"},
		{"NoPath", func(o *MP4Options) { o.Path = "" }, "MP4Options.Path is empty"},
		{"PathIsDir", func(o *MP4Options) { o.Path = dir }, "is a directory"},
		{"MissingDir", func(o *MP4Options) { o.Path = filepath.Join(dir, "nope", "a.mp4") }, "does not exist"},
		{"ZeroFPS", func(o *MP4Options) { o.FPS = 0 }, "MP4Options.FPS=0"},
		{"NaNFPS", func(o *MP4Options) { o.FPS = math.NaN() }, "MP4Options.FPS=NaN"},
		{"BadRate", func(o *MP4Options) { o.AudioSampleRate = 32001 }, "MP4Options.AudioSampleRate=32001"},
		{"ChannelsWithoutRate", func(o *MP4Options) { o.AudioChannels = 2 }, "MP4Options.AudioChannels=2 needs AudioSampleRate"},
		{"SixChannels", func(o *MP4Options) { o.AudioSampleRate, o.AudioChannels = testRate, 6 }, "MP4Options.AudioChannels=6"},
		{"CRF", func(o *MP4Options) { o.CRF = 60 }, "MP4Options.CRF=60"},
		{"Preset", func(o *MP4Options) { o.Preset = "turbo" }, `MP4Options.Preset="turbo"`},
		{"Bitrate", func(o *MP4Options) { o.AudioSampleRate, o.AudioBitrate = testRate, 100 }, "MP4Options.AudioBitrate=100"},
		{"NegativeFrames", func(o *MP4Options) { o.Frames = -1 }, "MP4Options.Frames=-1 is negative"},
		{"AudioWithoutFrames", func(o *MP4Options) { *o = withAudio(*o, 1); o.Frames = 0 }, "MP4Options.Frames=0 with audio"},
		{"AudioForVideoOnly", func(o *MP4Options) { o.Audio = sineAudio(1) }, "MP4Options.Audio has 2 channels but MP4Options.AudioSampleRate is 0 (video-only)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := good
			c.edit(&o)
			w, err := tools.NewMP4Writer(context.Background(), o)
			if err == nil {
				w.Abort()
				t.Fatalf("accepted %+v", o)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
	assertDir(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tools.NewMP4Writer(ctx, good); !errors.Is(err, context.Canceled) {
		t.Errorf("NewMP4Writer with a cancelled context: %v", err)
	}
}

// TestInvalidAudioRefusedFirst: audio the AAC encoder cannot take is refused by NewMP4Writer,
// before ffmpeg runs or any file is written, rather than after a whole clip's frames.
func TestInvalidAudioRefusedFirst(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ffmpeg-ran")
	tools := Tools{FFmpeg: fakeFFmpegRunning(t, `: >"`+marker+`"; exit 1`, "libx264", "aac")}
	cases := []struct {
		name string
		edit func(a [][]float32) [][]float32
		want string
	}{
		{"Missing", func([][]float32) [][]float32 { return nil }, "MP4Options.Audio has 0 channels, want MP4Options.AudioChannels=2"},
		{"MonoForStereo", func(a [][]float32) [][]float32 { return a[:1] }, "MP4Options.Audio has 1 channels, want MP4Options.AudioChannels=2"},
		{"EmptyChannel", func(a [][]float32) [][]float32 { a[0] = nil; return a }, "MP4Options.Audio channel 0 is empty"},
		{"UnequalChannels", func(a [][]float32) [][]float32 { a[1] = a[1][:100]; return a }, "channel 1 has 100 samples but channel 0 has 32000"},
		{"NaN", func(a [][]float32) [][]float32 { a[0][7] = float32(math.NaN()); return a }, "channel 0 sample 7 is NaN"},
		{"Inf", func(a [][]float32) [][]float32 { a[1][31999] = float32(math.Inf(-1)); return a }, "channel 1 sample 31999 is -Inf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			o := withAudio(MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS}, 1)
			o.Audio = c.edit(o.Audio)
			w, err := tools.NewMP4Writer(context.Background(), o)
			if err == nil {
				w.Abort()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("ffmpeg ran for invalid audio")
			}
			assertDir(t, dir)
		})
	}
}

// TestFrameCountMismatch: a writer told its frame count refuses, at Close, a file of another
// length, leaving nothing behind; with audio the track was fitted to the count announced.
func TestFrameCountMismatch(t *testing.T) {
	tools := requireTools(t)
	for _, c := range []struct {
		name    string
		audio   bool
		written int
	}{{"FewerWithAudio", true, testFrames - 3}, {"MoreWithAudio", true, testFrames + 2}, {"FewerVideoOnly", false, testFrames - 1}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			o := MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS, Frames: testFrames}
			if c.audio {
				o = withAudio(o, 1)
			}
			err := writeFrames(t, tools, o, c.written)
			want := fmt.Sprintf("%d frames were written but MP4Options.Frames=%d", c.written, testFrames)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Close: %v, want an error containing %q", err, want)
			}
			assertDir(t, dir)
		})
	}
}

func TestWriterMisuse(t *testing.T) {
	tools := requireTools(t)
	open := func(t *testing.T, audio bool) (*MP4Writer, string) {
		dir := t.TempDir()
		o := MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS}
		if audio {
			o = withAudio(o, 1)
		}
		w, err := tools.NewMP4Writer(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		return w, dir
	}
	cases := []struct {
		name  string
		audio bool // the audio file is a temporary that must go too
		run   func(w *MP4Writer) error
		want  string
		wantE error
	}{
		{"FrameSize", false, func(w *MP4Writer) error { return w.WriteFrame(make([]byte, 10)) }, "has 10 bytes, want Width*Height*3", nil},
		{"NoFrames", true, func(w *MP4Writer) error { return w.Close() }, "no frames were written", nil},
		{"Abort", true, func(w *MP4Writer) error {
			w.WriteFrame(makeFrame(0))
			w.Abort()
			return w.WriteFrame(makeFrame(1))
		}, "", ErrAborted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, dir := open(t, c.audio)
			err := c.run(w)
			if err == nil || !strings.Contains(err.Error(), c.want) || (c.wantE != nil && !errors.Is(err, c.wantE)) {
				t.Errorf("got %v, want an error containing %q (is %v)", err, c.want, c.wantE)
			}
			if err2 := w.Close(); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Close after failure: %v, want the same error", err2)
			}
			assertDir(t, dir)
		})
	}
}

func TestAudioFit(t *testing.T) {
	for _, c := range []struct {
		frames int
		fps    float64
		rate   int
		want   int
	}{{124, 24, 32000, 165334}, {24, 24, 32000, 32000}, {24, 24000.0 / 1001, 32000, 32032}, {1, 30, 44100, 1470}} {
		if got := AudioSamplesFor(c.frames, c.fps, c.rate); got != c.want {
			t.Errorf("AudioSamplesFor(%d, %v, %d) = %d, want %d", c.frames, c.fps, c.rate, got, c.want)
		}
	}
	a := [][]float32{{1, 2, 3}, {4, 5, 6}}
	if got := FitAudio(a, 2); !slices.Equal(got[0], []float32{1, 2}) || !slices.Equal(got[1], []float32{4, 5}) {
		t.Errorf("FitAudio trim = %v", got)
	}
	if got := FitAudio(a, 5); !slices.Equal(got[0], []float32{1, 2, 3, 0, 0}) || !slices.Equal(got[1], []float32{4, 5, 6, 0, 0}) {
		t.Errorf("FitAudio pad = %v", got)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := newTailBuffer()
	for i := range 3000 {
		fmt.Fprintf(tb, "line %d\n", i)
	}
	lines := strings.Split(tb.Tail(), "\n")
	if len(lines) != tailLines || lines[0] != "line 2980" || lines[len(lines)-1] != "line 2999" {
		t.Errorf("tail = %d lines %q .. %q, want line 2980 .. line 2999", len(lines), lines[0], lines[len(lines)-1])
	}
}

// fakeFFmpeg writes a shell script standing in for ffmpeg: it lists the given encoders and
// otherwise never reads its input, like an ffmpeg hung on a dead disk.
func fakeFFmpeg(t *testing.T, encoders ...string) string {
	t.Helper()
	return fakeFFmpegRunning(t, "exec sleep 600", encoders...)
}

// fakeFFmpegRunning is a fake ffmpeg that lists encoders and otherwise runs the shell
// commands of body, with $out the output file (ffmpeg's last argument without "file:").
func fakeFFmpegRunning(t *testing.T, body string, encoders ...string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("fake ffmpeg is a shell script")
	}
	var list strings.Builder
	for _, e := range encoders {
		fmt.Fprintf(&list, " V....D %s fake\\n", e)
	}
	path := filepath.Join(t.TempDir(), "ffmpeg")
	script := "#!/bin/sh\ncase \"$*\" in *-encoders*) printf '" + list.String() + "'; exit 0;; esac\n" +
		"for a; do out=${a#file:}; done\n" + body + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMissingEncoder(t *testing.T) {
	_, err := FindTools(fakeFFmpeg(t, "aac"), "")
	if err == nil || !strings.Contains(err.Error(), "lacks encoder(s) libx264") || !strings.Contains(err.Error(), "apt-get install ffmpeg") {
		t.Errorf("FindTools with an ffmpeg lacking libx264: %v", err)
	}
}

// TestDeadlineWhileBlocked: a write blocked on an ffmpeg that stopped reading is released by
// the context's deadline, which kills ffmpeg.
func TestDeadlineWhileBlocked(t *testing.T) {
	tools := Tools{FFmpeg: fakeFFmpeg(t, "libx264", "aac")}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	w, err := tools.NewMP4Writer(ctx, MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS})
	if err != nil {
		t.Fatal(err)
	}
	frame := makeFrame(0)
	// The pipe holds a few frames; a write then blocks until the deadline kills the reader.
	for i := 0; err == nil; i++ {
		if i > 1000 {
			t.Fatal("1000 frames written into a process that never reads")
		}
		err = w.WriteFrame(frame)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked WriteFrame returned %v, want context.DeadlineExceeded", err)
	}
	assertDir(t, dir)
}
