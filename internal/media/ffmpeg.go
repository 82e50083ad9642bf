package media

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Environment variables that point at the ffmpeg and ffprobe executables, overriding PATH.
// This package never reads them: the SDK's options read them and pass their values to
// FindTools.
const (
	EnvFFmpeg  = "FASTVIDEO_FFMPEG"
	EnvFFprobe = "FASTVIDEO_FFPROBE"
)

// ErrNotFound is wrapped by FindTools, Tools.Check and Tools.Probe errors when an executable
// does not exist (neither on PATH nor at the path given).
var ErrNotFound = errors.New("executable not found")

// requiredEncoders are the ffmpeg encoders every output of the SDK needs.
var requiredEncoders = []struct{ name, what string }{
	{"libx264", "H.264 video"},
	{"aac", "AAC audio"},
}

const installHint = "install ffmpeg with libx264 (Debian/Ubuntu: apt-get install ffmpeg; macOS: brew install ffmpeg) " +
	"or set " + EnvFFmpeg + " to the path of such an ffmpeg executable"

// encoderCheck caches successful encoder checks per resolved executable path: running
// `ffmpeg -encoders` costs ~50 ms and the pipeline validates before every generation.
// Failures are not cached, so installing ffmpeg fixes a long-running process without a restart.
var encoderCheck struct {
	mu sync.Mutex
	ok map[string]bool
}

// Tools names the ffmpeg and ffprobe executables by absolute path. Find them once with
// FindTools and pass the value to whatever writes or probes files.
type Tools struct {
	FFmpeg string
	// FFprobe is "" when none was found; only Probe needs it.
	FFprobe string
}

// FindTools resolves the executables. ffmpeg is the value of $FASTVIDEO_FFMPEG as the caller
// read it (a path, or a bare name looked up on PATH); "" means "ffmpeg" on PATH. That ffmpeg
// must run and provide the libx264 and aac encoders. ffprobe is the value of
// $FASTVIDEO_FFPROBE; "" means the ffprobe next to ffmpeg (a custom ffmpeg build ships its
// own), else "ffprobe" on PATH, else none.
func FindTools(ffmpeg, ffprobe string) (Tools, error) {
	ff, err := findFFmpeg(ffmpeg)
	if err != nil {
		return Tools{}, err
	}
	if err := checkEncoders(ff); err != nil {
		return Tools{}, err
	}
	probe, err := findFFprobe(ffprobe, ff)
	if err != nil {
		return Tools{}, err
	}
	return Tools{FFmpeg: ff, FFprobe: probe}, nil
}

// Check reports whether t.FFmpeg is still a usable ffmpeg. Call it before expensive work so a
// missing encoder fails in milliseconds, not after the denoising loop.
func (t Tools) Check() error {
	_, err := t.usableFFmpeg()
	return err
}

// usableFFmpeg is the absolute path of t.FFmpeg once it passed the encoder check.
func (t Tools) usableFFmpeg() (string, error) {
	if t.FFmpeg == "" {
		return "", fmt.Errorf("media: no ffmpeg was given (find it with FindTools); %s", installHint)
	}
	ff, err := lookExecutable(t.FFmpeg, "")
	if err != nil {
		return "", fmt.Errorf("%w; %s", err, installHint)
	}
	return ff, checkEncoders(ff)
}

func findFFmpeg(ffmpeg string) (string, error) {
	if ffmpeg != "" {
		return lookExecutable(ffmpeg, EnvFFmpeg)
	}
	p, err := lookExecutable("ffmpeg", "")
	if err != nil {
		return "", fmt.Errorf("%w; %s", err, installHint)
	}
	return p, nil
}

// findFFprobe resolves an explicit ffprobe strictly and an implicit one leniently: a missing
// ffprobe only matters to Probe, which reports it.
func findFFprobe(ffprobe, ffmpeg string) (string, error) {
	if ffprobe != "" {
		return lookExecutable(ffprobe, EnvFFprobe)
	}
	sibling := filepath.Join(filepath.Dir(ffmpeg), "ffprobe"+filepath.Ext(ffmpeg))
	if p, err := lookExecutable(sibling, ""); err == nil {
		return p, nil
	}
	if p, err := lookExecutable("ffprobe", ""); err == nil {
		return p, nil
	}
	return "", nil
}

// lookExecutable resolves name (a path or a bare name for PATH lookup) to an absolute path.
// env names the variable the value came from, so the error tells the user what to change.
func lookExecutable(name, env string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		abs, aerr := filepath.Abs(p)
		if aerr != nil {
			return "", fmt.Errorf("media: resolving %q: %w", p, aerr)
		}
		return abs, nil
	}
	var what string
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		what = "does not exist"
		err = fmt.Errorf("%w: %w", ErrNotFound, err)
	default:
		// Exists but is a directory or lacks the execute bit.
		what = "is not an executable file"
	}
	if env != "" {
		return "", fmt.Errorf("media: %s=%q %s (%w); point %s at an executable or unset it to use the one on PATH",
			env, name, what, err, env)
	}
	return "", fmt.Errorf("media: %q %s on PATH (%w)", name, what, err)
}

func checkEncoders(path string) error {
	encoderCheck.mu.Lock()
	defer encoderCheck.mu.Unlock()
	if encoderCheck.ok[path] {
		return nil
	}
	// Generous timeout: a cold start on a loaded CI machine can take seconds, and a hung
	// ffmpeg must not hang the caller.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-hide_banner", "-nostdin", "-encoders")
	var stdout bytes.Buffer
	stderr := newTailBuffer()
	cmd.Stdout = &stdout
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return &FFmpegError{Op: "running `ffmpeg -encoders`", Path: path, Err: fmt.Errorf("%w; %s", err, installHint), Stderr: stderr.Tail()}
	}
	have := map[string]bool{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		// Lines look like " V....D libx264   libx264 H.264 / AVC ...": flags, name, description.
		if f := strings.Fields(sc.Text()); len(f) >= 2 {
			have[f[1]] = true
		}
	}
	var missing []string
	for _, e := range requiredEncoders {
		if !have[e.name] {
			missing = append(missing, fmt.Sprintf("%s (%s)", e.name, e.what))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("media: ffmpeg at %q lacks encoder(s) %s; %s", path, strings.Join(missing, ", "), installHint)
	}
	if encoderCheck.ok == nil {
		encoderCheck.ok = map[string]bool{}
	}
	encoderCheck.ok[path] = true
	return nil
}

// FFmpegError reports a failed ffmpeg or ffprobe run. Err is the cause (an exit status, a
// broken pipe, or the context's error, usable with errors.Is); Stderr holds the last lines
// ffmpeg printed, which is where the actual reason is.
type FFmpegError struct {
	Op     string // what was being done, e.g. "encoding video"
	Path   string // the output (or probed) file, or the executable for environment checks
	Err    error
	Stderr string
}

func (e *FFmpegError) Error() string {
	s := fmt.Sprintf("media: %s for %q: %v", e.Op, e.Path, e.Err)
	if e.Stderr != "" {
		s += "\nffmpeg stderr (last lines):\n" + e.Stderr
	}
	return s
}

func (e *FFmpegError) Unwrap() error { return e.Err }

// tailBuffer keeps the last bytes written to it, so a chatty ffmpeg cannot grow memory while
// an error can still quote its final lines.
type tailBuffer struct {
	mu       sync.Mutex
	buf      []byte
	writeErr string // the first line reporting a write error, kept even when buf is trimmed
}

// WriteError returns the first line of ffmpeg's stderr that reports a failed write, or "".
func (t *tailBuffer) WriteError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.writeErr
}

// findWriteError returns the line of buf holding a write-error mark at or after from, or "".
func findWriteError(buf []byte, from int) string {
	for _, m := range writeErrorMarks {
		i := bytes.Index(buf[from:], []byte(m))
		if i < 0 {
			continue
		}
		i += from
		start := bytes.LastIndexAny(buf[:i], "\r\n") + 1
		end := len(buf)
		if j := bytes.IndexAny(buf[i:], "\r\n"); j >= 0 {
			end = i + j
		}
		return strings.TrimSpace(string(buf[start:end]))
	}
	return ""
}

const (
	tailKeepBytes = 16 << 10
	tailLines     = 20
)

func newTailBuffer() *tailBuffer { return &tailBuffer{} }

// writeErrorMarks are what ffmpeg prints when writing its output failed. It may still exit 0
// (after "Error writing trailer"), so the writer looks for these itself.
var writeErrorMarks = []string{
	"No space left on device", "Disk quota exceeded", "File too large", "Input/output error",
	"I/O error", "Read-only file system", "Error writing trailer", "Error closing file",
}

// markOverlap is how far back a scan reaches into earlier writes: a mark split between two
// writes is still found.
const markOverlap = 64

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	from := max(0, len(t.buf)-markOverlap)
	t.buf = append(t.buf, p...)
	if t.writeErr == "" {
		t.writeErr = findWriteError(t.buf, from)
	}
	if len(t.buf) > 2*tailKeepBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailKeepBytes:]...)
	}
	return len(p), nil
}

// Tail returns the last tailLines non-empty lines.
func (t *tailBuffer) Tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.ReplaceAll(string(t.buf), "\r", "\n"), "\n")
	var kept []string
	for i := len(lines) - 1; i >= 0 && len(kept) < tailLines; i-- {
		if l := strings.TrimRight(lines[i], " \t"); l != "" {
			kept = append(kept, l)
		}
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	return strings.Join(kept, "\n")
}
