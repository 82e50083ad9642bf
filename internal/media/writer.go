package media

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
)

// Defaults match the MLX H3 runtime's mux (CRF 18, AAC 192 kb/s) except the preset: the slowest
// libx264 preset that keeps pace with the video decoders, so encoding adds no wait after the last
// frame. On the H200 machine's 16 cores (bench/x264_presets.sh, BENCHMARKS.md) medium encodes 832x480
// noise frames at 46 frames/s, below the H3 decoder's ~59, and faster at 107, for a file 2 % smaller;
// Preset "medium" gives upstream's encoding.
//
// The default encoding also shortens libx264's rate-control lookahead to DefaultLookahead frames
// (faster's own is 20): the mux stage is the encoder's tail after the last frame, its lookahead
// and frame threads flushing, and on the GPU machine's 16 cores (bench/x264_tail.py, BENCHMARKS.md)
// 10 frames cut that tail from 0.47 to 0.25 s on noise frames and from 0.16 to 0.11 s on moving
// ones, the files the same size. A named Preset, "faster" included, is libx264's preset unchanged.
const (
	DefaultCRF          = 18
	DefaultPreset       = "faster"
	DefaultLookahead    = 10
	DefaultAudioBitrate = 192_000
	DefaultChannels     = 2
)

// MaxFrameSide bounds Width and Height: libx264 encodes at most 16384 pixels a side, and the
// bound keeps Width*Height*3 far from overflowing.
const MaxFrameSide = 16384

// ErrAborted is the error of a writer ended with Abort.
var ErrAborted = errors.New("media: writer aborted")

// X264Presets are libx264's speed presets, fastest first.
var X264Presets = []string{"ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo"}

// Sample rates the AAC encoder accepts (MPEG-4 sampling frequency table).
var aacRates = []int{96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350}

// MP4Options configures an MP4Writer. The zero value of every optional field selects the
// default noted beside it.
type MP4Options struct {
	// Path is the output file. Its directory must exist. An existing file is replaced, and
	// only when the whole encode succeeded.
	Path string
	// Width and Height of every frame in pixels; both must be even (yuv420p halves chroma).
	Width, Height int
	// FPS is the frame rate; non-integer rates are passed through ffmpeg's rational
	// approximation, so 24000.0/1001 becomes exactly 24000/1001.
	FPS float64
	// Frames is the number of frames the file will hold; Close fails when another number was
	// written. Required with audio, whose track is fitted to this many frames before the first
	// one is encoded; optional (0) for a video-only file.
	Frames int
	// AudioSampleRate in Hz; 0 writes a video-only file (Wan). H3 uses 32000.
	AudioSampleRate int
	// AudioChannels: 1 or 2; 0 means 2 when AudioSampleRate is set.
	AudioChannels int
	// Audio is the whole audio track, required when AudioSampleRate is set and empty otherwise:
	// planar (one slice per channel, all the same length), float32 samples nominally in [-1, 1]
	// at AudioSampleRate. It is cut or zero-padded to AudioSamplesFor(Frames, FPS,
	// AudioSampleRate) samples, as the MLX H3 runtime does: ffmpeg's -shortest would otherwise
	// drop the video frames that outlast a short track. It must be known before the first frame
	// because the one ffmpeg run takes it as an input file from its start (see MP4Writer). The
	// writer does not keep it after NewMP4Writer returns.
	Audio [][]float32
	// CRF is libx264's constant rate factor, 1..51 (lower is better); 0 means DefaultCRF.
	CRF int
	// Preset is the libx264 speed preset; "" means DefaultPreset with DefaultLookahead.
	Preset string
	// AudioBitrate in bits/s; 0 means DefaultAudioBitrate.
	AudioBitrate int

	// lookahead is libx264's rc-lookahead in frames, 0 for the preset's own (set with the default
	// Preset).
	lookahead int
	// extraVideoArgs are appended to the video's output options; tests use it to force
	// an ffmpeg failure without a broken ffmpeg install.
	extraVideoArgs []string
}

// withDefaults validates o and returns it with defaults applied and Path made absolute.
func (o MP4Options) withDefaults() (MP4Options, error) {
	if o.Path == "" {
		return o, errors.New("media: MP4Options.Path is empty; set it to the output .mp4 file")
	}
	abs, err := filepath.Abs(o.Path)
	if err != nil {
		return o, fmt.Errorf("media: MP4Options.Path=%q: %w", o.Path, err)
	}
	o.Path = abs
	if st, err := os.Stat(o.Path); err == nil && st.IsDir() {
		return o, fmt.Errorf("media: MP4Options.Path=%q is a directory; give a file path such as %q", o.Path, filepath.Join(o.Path, "video.mp4"))
	}
	dir := filepath.Dir(o.Path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return o, fmt.Errorf("media: MP4Options.Path=%q: directory %q does not exist; create it first", o.Path, dir)
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"Width", o.Width}, {"Height", o.Height}} {
		if d.v <= 0 || d.v > MaxFrameSide {
			return o, fmt.Errorf("media: MP4Options.%s=%d must be in 1..%d", d.name, d.v, MaxFrameSide)
		}
		if d.v%2 != 0 {
			return o, fmt.Errorf("media: MP4Options.%s=%d is odd; H.264 yuv420p needs even width and height: crop or pad frames to %d or %d",
				d.name, d.v, d.v-1, d.v+1)
		}
	}
	if !(o.FPS > 0) || math.IsInf(o.FPS, 0) {
		return o, fmt.Errorf("media: MP4Options.FPS=%v must be a positive finite frame rate (e.g. 24)", o.FPS)
	}
	if o.Frames < 0 {
		return o, fmt.Errorf("media: MP4Options.Frames=%d is negative; give the number of frames the file will hold, or 0 to leave it unchecked (video-only)", o.Frames)
	}
	switch {
	case o.AudioSampleRate == 0 && o.AudioChannels != 0:
		return o, fmt.Errorf("media: MP4Options.AudioChannels=%d needs AudioSampleRate (e.g. 32000); leave both 0 for video-only", o.AudioChannels)
	case o.AudioSampleRate == 0 && len(o.Audio) != 0:
		return o, fmt.Errorf("media: MP4Options.Audio has %d channels but MP4Options.AudioSampleRate is 0 (video-only); set AudioSampleRate and AudioChannels, or leave Audio nil", len(o.Audio))
	case o.AudioSampleRate != 0:
		if !slices.Contains(aacRates, o.AudioSampleRate) {
			return o, fmt.Errorf("media: MP4Options.AudioSampleRate=%d is not an AAC sample rate; use one of %v (resample first)", o.AudioSampleRate, aacRates)
		}
		if o.AudioChannels == 0 {
			o.AudioChannels = DefaultChannels
		}
		if o.AudioChannels != 1 && o.AudioChannels != 2 {
			return o, fmt.Errorf("media: MP4Options.AudioChannels=%d: only mono (1) and stereo (2) are supported", o.AudioChannels)
		}
		if o.AudioBitrate == 0 {
			o.AudioBitrate = DefaultAudioBitrate
		}
		if o.AudioBitrate < 8000 || o.AudioBitrate > 512_000 {
			return o, fmt.Errorf("media: MP4Options.AudioBitrate=%d bit/s is outside 8000..512000 (default %d)", o.AudioBitrate, DefaultAudioBitrate)
		}
		if o.Frames == 0 {
			return o, errors.New("media: MP4Options.Frames=0 with audio; set Frames to the number of frames the file will hold, the length the audio track is fitted to")
		}
		if err := checkAudio(o.Audio, o.AudioChannels); err != nil {
			return o, err
		}
	}
	if o.CRF == 0 {
		o.CRF = DefaultCRF
	}
	if o.CRF < 1 || o.CRF > 51 {
		return o, fmt.Errorf("media: MP4Options.CRF=%d is outside libx264's 1..51 (0 selects %d)", o.CRF, DefaultCRF)
	}
	if o.Preset == "" {
		o.Preset, o.lookahead = DefaultPreset, DefaultLookahead
	}
	if !slices.Contains(X264Presets, o.Preset) {
		return o, fmt.Errorf("media: MP4Options.Preset=%q is not a libx264 preset; use one of %v", o.Preset, X264Presets)
	}
	return o, nil
}

type writerState int

const (
	stateOpen writerState = iota
	stateClosed
	stateFailed
)

// MP4Writer streams rgb24 frames into an H.264 MP4 through one ffmpeg run, which also encodes
// the AAC track when there is audio. Use it from one goroutine at a time (calls are
// serialized); the context's cancellation may arrive from anywhere. After any error the writer
// is finished: ffmpeg is gone, no file is left behind, and every later call returns the same
// error.
//
// The audio track is given whole to NewMP4Writer, before the first frame, and reaches ffmpeg
// as a temporary f32le file named on its command line beside the frame pipe. ffmpeg opens and
// probes every input at startup and then reads them interleaved by timestamp, so an input that
// is complete from the start is read as the video advances and costs the encode almost
// nothing (~0.05 s for a 5 s clip). Audio that arrived only after the last frame needed a
// second ffmpeg pass copying the H.264 stream (~0.3 s): a second pipe into the first ffmpeg,
// empty until the end, stalls the video or overflows ffmpeg's muxing queue, depending on
// ffmpeg's version. A file also lets ffmpeg's exit status be the single success signal, with
// no writer goroutine racing -shortest for a broken pipe.
type MP4Writer struct {
	ctx       context.Context
	opts      MP4Options // without Audio: NewMP4Writer writes the track to its temporary file
	ffmpeg    string
	frameSize int
	stopWatch func() bool // context.AfterFunc's stop

	// proc is ffmpeg, set before the cancellation callback is registered and never changed,
	// so the callback reads it without mu and can kill ffmpeg while a WriteFrame or Close
	// holding mu is blocked on it.
	proc *proc

	mu       sync.Mutex
	state    writerState
	err      error
	stdin    *os.File // write end of ffmpeg's stdin
	frames   int
	tmpFinal string   // what is renamed to opts.Path
	temps    []string // everything to delete on failure: tmpFinal and the audio file
}

// NewMP4Writer validates opts and ffmpeg, writes the audio track (if any) to a temporary file
// and starts the encoder. Invalid options, audio included, are refused before ffmpeg starts.
// Cancelling ctx at any time before Close returns kills ffmpeg and removes the temporary
// files, even if no further call is made on the writer.
func (t Tools) NewMP4Writer(ctx context.Context, opts MP4Options) (*MP4Writer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("media: not starting %q: %w", opts.Path, err)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ff, err := t.usableFFmpeg()
	if err != nil {
		return nil, err
	}
	audio := opts.Audio
	opts.Audio = nil
	w := &MP4Writer{ctx: ctx, opts: opts, ffmpeg: ff, frameSize: opts.Width * opts.Height * 3}

	var token [6]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("media: temp name: %w", err)
	}
	// Hidden names in the target's directory: the final rename is then atomic (same file
	// system) and a reader globbing *.mp4 never sees a half-written file.
	w.tmpFinal = filepath.Join(filepath.Dir(opts.Path), "."+filepath.Base(opts.Path)+"."+hex.EncodeToString(token[:])+".part")
	w.temps = []string{w.tmpFinal}

	args := []string{
		"-hide_banner", "-nostats", "-loglevel", "level+warning",
		"-f", "rawvideo", "-pix_fmt", "rgb24",
		"-video_size", fmt.Sprintf("%dx%d", opts.Width, opts.Height),
		"-framerate", strconv.FormatFloat(opts.FPS, 'g', -1, 64),
		"-i", "pipe:0",
	}
	if opts.AudioSampleRate > 0 {
		pcm, err := writeAudioFile(opts, audio)
		if err != nil {
			return nil, err
		}
		w.temps = append(w.temps, pcm)
		args = append(args,
			"-f", "f32le", "-ar", strconv.Itoa(opts.AudioSampleRate), "-ac", strconv.Itoa(opts.AudioChannels),
			"-i", "file:"+pcm,
			"-map", "0:v:0", "-map", "1:a:0")
	} else {
		args = append(args, "-an")
	}
	args = append(args, opts.videoEncoderArgs()...)
	if opts.AudioSampleRate > 0 {
		// The track is fitted to the frames, so -shortest only trims AAC's last partial frame.
		args = append(args, "-c:a", "aac", "-b:a", strconv.Itoa(opts.AudioBitrate), "-shortest")
	}
	// -n (never overwrite): the random name is ours alone; an existing file means a bug.
	args = append(args, "-movflags", "+faststart", "-f", "mp4", "-n", "file:"+w.tmpFinal)

	pr, pw, err := os.Pipe()
	if err != nil {
		w.removeTemps()
		return nil, fmt.Errorf("media: stdin pipe for ffmpeg: %w", err)
	}
	p, err := startProc(ff, args, pr)
	pr.Close() // ffmpeg holds its own copy; ours would keep the pipe open after ffmpeg dies.
	if err != nil {
		pw.Close()
		w.removeTemps()
		return nil, &FFmpegError{Op: "starting ffmpeg", Path: opts.Path, Err: err}
	}
	w.proc, w.stdin = p, pw
	w.stopWatch = context.AfterFunc(ctx, w.onCancel)
	return w, nil
}

// videoEncoderArgs are ffmpeg's output options for the video stream: the conversion to the
// encoder's YUV, libx264's settings and the colour tags.
func (o MP4Options) videoEncoderArgs() []string {
	args := []string{
		// swscale converts RGB with BT.601 coefficients unless told otherwise, while players
		// assume BT.709 for untagged HD video; convert with BT.709 and tag it, so colors
		// survive at every resolution. swscale's default fast path is off by up to ~1.5
		// levels on flat colors; accurate rounding halves that at negligible cost next to x264.
		"-vf", "scale=out_color_matrix=bt709:out_range=tv:flags=accurate_rnd+full_chroma_int,format=yuv420p",
		"-c:v", "libx264", "-preset", o.Preset, "-crf", strconv.Itoa(o.CRF),
		"-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
	}
	if o.lookahead > 0 {
		args = append(args, "-x264-params", "rc-lookahead="+strconv.Itoa(o.lookahead))
	}
	return append(args, o.extraVideoArgs...)
}

// writeAudioFile writes the audio track, fitted to opts.Frames, to a hidden temporary f32le
// file beside the output and returns its name; on error it leaves no file.
func writeAudioFile(opts MP4Options, audio [][]float32) (string, error) {
	audio = FitAudio(audio, AudioSamplesFor(opts.Frames, opts.FPS, opts.AudioSampleRate))
	f, err := os.CreateTemp(filepath.Dir(opts.Path), "."+filepath.Base(opts.Path)+".*.f32le")
	if err != nil {
		return "", fmt.Errorf("media: writing the audio track for %q: %w", opts.Path, err)
	}
	err = writeF32LE(f, audio)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("media: writing the audio track for %q: %w", opts.Path, err)
	}
	return f.Name(), nil
}

// Frames returns the number of frames written so far.
func (w *MP4Writer) Frames() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.frames
}

// WriteFrame appends one frame: Width*Height*3 bytes of packed RGB, row-major, top row first.
// rgb may be reused once WriteFrame returns.
func (w *MP4Writer) WriteFrame(rgb []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != stateOpen {
		return w.finishedErr()
	}
	if err := w.ctx.Err(); err != nil {
		return w.failLocked("encoding video", w.ctxErr())
	}
	if len(rgb) != w.frameSize {
		return w.failLocked("encoding video", fmt.Errorf("frame %d has %d bytes, want Width*Height*3 = %d*%d*3 = %d (packed rgb24)",
			w.frames, len(rgb), w.opts.Width, w.opts.Height, w.frameSize))
	}
	if _, err := w.stdin.Write(rgb); err != nil {
		if w.ctx.Err() != nil {
			return w.failLocked("encoding video", w.ctxErr())
		}
		// ffmpeg stopped reading: it exited, and its exit status and stderr say why.
		w.stdin.Close()
		w.stdin = nil
		werr := w.proc.wait()
		if werr == nil {
			werr = err
		}
		return w.failLocked("encoding video", fmt.Errorf("ffmpeg stopped reading after %d frames: %w", w.frames, werr))
	}
	w.frames++
	return nil
}

// Close finishes the file and renames it to Path: the end of the frame pipe lets ffmpeg flush
// the encoders and write the index, which +faststart moves before the media data. Close
// always ends the writer: on error, a frame count other than MP4Options.Frames included,
// nothing is left at Path and the temporary files are removed.
func (w *MP4Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != stateOpen {
		return w.finishedErr()
	}
	if w.ctx.Err() != nil {
		return w.failLocked("encoding video", w.ctxErr())
	}
	if w.frames == 0 {
		return w.failLocked("closing", errors.New("no frames were written; call WriteFrame at least once"))
	}
	if w.opts.Frames > 0 && w.frames != w.opts.Frames {
		// Checked before ffmpeg finishes: a file of the wrong length is never worth its flush.
		return w.failLocked("closing", fmt.Errorf("%d frames were written but MP4Options.Frames=%d; write exactly Frames frames, or set Frames to the count the file should hold",
			w.frames, w.opts.Frames))
	}
	w.stdin.Close() // EOF makes ffmpeg flush the encoders and finish the file.
	w.stdin = nil
	if err := w.proc.wait(); err != nil {
		if w.ctx.Err() != nil {
			return w.failLocked("encoding video", w.ctxErr())
		}
		return w.failLocked("encoding video", err)
	}
	if w.ctx.Err() != nil {
		return w.failLocked("finishing", w.ctxErr())
	}
	if err := verifyMP4(w.tmpFinal, w.frames); err != nil {
		return w.failLocked("checking the finished file", err)
	}
	if err := os.Rename(w.tmpFinal, w.opts.Path); err != nil {
		return w.failLocked("renaming the finished file", err)
	}
	w.temps = slices.DeleteFunc(w.temps, func(t string) bool { return t == w.tmpFinal })
	w.removeTemps() // the audio file, when there was audio
	w.state = stateClosed
	w.stopWatch()
	return nil
}

// Abort stops ffmpeg and removes every temporary file; nothing is written to Path. It is a
// no-op after Close or a failure, so `defer w.Abort()` is the idiomatic guard.
func (w *MP4Writer) Abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == stateOpen {
		w.failLocked("encoding video", ErrAborted)
	}
}

// checkAudio validates MP4Options.Audio against the channel count, before any file or ffmpeg
// exists: the AAC encoder would otherwise fail only at the end of the encode, or silently encode
// garbage.
func checkAudio(audio [][]float32, channels int) error {
	if len(audio) != channels {
		return fmt.Errorf("media: MP4Options.Audio has %d channels, want MP4Options.AudioChannels=%d (planar: one slice per channel)", len(audio), channels)
	}
	for c, ch := range audio {
		if len(ch) == 0 {
			return fmt.Errorf("media: MP4Options.Audio channel %d is empty; give the decoded waveform", c)
		}
		if len(ch) != len(audio[0]) {
			return fmt.Errorf("media: MP4Options.Audio channel %d has %d samples but channel 0 has %d; channels must have equal length", c, len(ch), len(audio[0]))
		}
		for i, v := range ch {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("media: MP4Options.Audio channel %d sample %d is %v; the AAC encoder needs finite samples (check the audio decoder's output)", c, i, v)
			}
		}
	}
	return nil
}

// writeF32LE writes planar channels as interleaved little-endian float32, ffmpeg's f32le.
func writeF32LE(f *os.File, audio [][]float32) error {
	bw := bufio.NewWriterSize(f, 1<<16)
	var b [4]byte
	for i := range audio[0] {
		for _, ch := range audio {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(ch[i]))
			if _, err := bw.Write(b[:]); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

func (w *MP4Writer) onCancel() {
	w.proc.kill()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == stateOpen {
		w.failLocked("encoding video", w.ctxErr())
	}
}

func (w *MP4Writer) ctxErr() error {
	err, cause := w.ctx.Err(), context.Cause(w.ctx)
	if cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

func (w *MP4Writer) finishedErr() error {
	if w.state == stateClosed {
		return fmt.Errorf("media: writer for %q is already closed", w.opts.Path)
	}
	return w.err
}

// failLocked ends the writer: kills ffmpeg, waits for it (so the stderr tail is complete and
// it no longer holds the files), removes every temporary file and records the error.
func (w *MP4Writer) failLocked(op string, cause error) error {
	if w.state != stateOpen {
		return w.err
	}
	w.state = stateFailed
	if w.stdin != nil {
		w.stdin.Close()
		w.stdin = nil
	}
	var tail string
	if w.proc != nil {
		w.proc.kill()
		w.proc.wait()
		tail = w.proc.stderr.Tail()
	}
	w.removeTemps()
	if w.stopWatch != nil {
		w.stopWatch()
	}
	w.err = &FFmpegError{Op: op, Path: w.opts.Path, Err: cause, Stderr: tail}
	return w.err
}

func (w *MP4Writer) removeTemps() {
	for _, t := range w.temps {
		os.Remove(t)
	}
	w.temps = nil
}

// proc is one ffmpeg run; wait may be called any number of times.
type proc struct {
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{}
	err    error
}

func startProc(path string, args []string, stdin *os.File) (*proc, error) {
	cmd := exec.Command(path, args...)
	p := &proc{cmd: cmd, stderr: newTailBuffer(), done: make(chan struct{})}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// wait returns ffmpeg's exit error, or, for an exit status 0, the write error it reported on
// stderr: a full disk can end in "Error writing trailer ... No space left on device" and 0.
func (p *proc) wait() error {
	<-p.done
	if p.err != nil {
		return p.err
	}
	if line := p.stderr.WriteError(); line != "" {
		return fmt.Errorf("ffmpeg exited with status 0 but reported a write error: %s", line)
	}
	return nil
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill() // an error means it already exited, which is what we want
	}
}

// AudioSamplesFor returns how many samples per channel cover frames video frames at fps:
// ceil(frames/fps * sampleRate), the length the MLX H3 runtime trims or pads audio to before
// muxing (124 frames at 24 fps, 32 kHz: 165,334).
func AudioSamplesFor(frames int, fps float64, sampleRate int) int {
	x := float64(frames) * float64(sampleRate) / fps
	// The tolerance absorbs rounding in rates like 24000/1001 held as a float64, which would
	// otherwise turn an exact sample count into one more.
	return int(math.Ceil(x - 1e-6))
}

// FitAudio returns the planar channels cut or zero-padded to n samples each. Cut channels
// share memory with the input; padded ones are copies.
func FitAudio(audio [][]float32, n int) [][]float32 {
	out := make([][]float32, len(audio))
	for c, ch := range audio {
		if len(ch) >= n {
			out[c] = ch[:n:n]
			continue
		}
		out[c] = make([]float32, n)
		copy(out[c], ch)
	}
	return out
}
