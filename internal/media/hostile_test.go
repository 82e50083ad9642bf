package media

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeWithFake writes a few frames through a fake ffmpeg running body and returns Close's error.
func writeWithFake(t *testing.T, dir, body string) error {
	t.Helper()
	tools := Tools{FFmpeg: fakeFFmpegRunning(t, body, "libx264", "aac")}
	return writeFrames(t, tools, MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS}, 3)
}

// A full disk: ffmpeg reports "Error writing trailer ... No space left on device" and still
// exits 0. The writer must fail, quote the line, and leave no file behind.
func TestFullDiskWithExitZeroFails(t *testing.T) {
	dir := t.TempDir()
	err := writeWithFake(t, dir, `cat >/dev/null; printf 'ftypisom' >"$out"
echo "[mp4 @ 0x55d0] Error writing trailer of $out: No space left on device" >&2; exit 0`)
	if err == nil || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("got %v, want an error quoting ffmpeg's write error", err)
	}
	assertDir(t, dir)
}

// ffmpeg exiting 0 silently with an unfinished file (no moov box) is caught by the check of
// the finished file, before the rename.
func TestUnfinishedMP4IsRefused(t *testing.T) {
	dir := t.TempDir()
	// A valid ftyp box and an mdat box, but no moov: what a killed muxer leaves.
	err := writeWithFake(t, dir, `cat >/dev/null
printf '\000\000\000\020ftypisom\000\000\002\000\000\000\000\020mdat\001\002\003\004\005\006\007\010' >"$out"; exit 0`)
	if err == nil || !strings.Contains(err.Error(), "no moov box") {
		t.Fatalf("got %v, want the missing moov box named", err)
	}
	assertDir(t, dir)
}

// The finished file must hold every frame written.
func TestFrameCountIsVerified(t *testing.T) {
	tools := requireTools(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "two.mp4")
	writeClip(t, tools, MP4Options{Path: src, Width: testW, Height: testH, FPS: testFPS})
	if err := verifyMP4(src, testFrames); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	if err := verifyMP4(src, testFrames+1); err == nil || !strings.Contains(err.Error(), "holds 24 video frames, 25 were written") {
		t.Fatalf("a frame short: got %v", err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.mp4")
	if err := os.WriteFile(cut, data[:len(data)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := verifyMP4(cut, testFrames); err == nil {
		t.Fatal("a truncated file passed")
	}
}

func TestSweepStaging(t *testing.T) {
	dir := t.TempDir()
	ours := []string{
		".clip.mp4.fastvideo-0123456789ab.mp4",
		".clip.mp4.0123456789ab.part",
		".clip.mp4.0123456789ab.video.part",
		".clip.mp4.123456789.f32le",
		"..clip.mp4.fastvideo-0123456789ab.mp4.0123456789ab.part",
	}
	notOurs := []string{"clip.mp4", ".clip.mp4", ".clip.mp4.fastvideo-0123.mp4", ".notes.part", "x.0123456789ab.part"}
	old := time.Now().Add(-2 * time.Hour)
	for _, n := range append(append([]string{}, ours...), notOurs...) {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	young := filepath.Join(dir, ".new.mp4.fastvideo-ba9876543210.mp4")
	if err := os.WriteFile(young, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "clip.mp4"), filepath.Join(dir, ".link.mp4.0123456789ab.part")); err != nil {
		t.Fatal(err)
	}
	removed, err := SweepStaging(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != len(ours) {
		t.Errorf("removed %q, want %d files", removed, len(ours))
	}
	assertDir(t, dir, append(notOurs, filepath.Base(young), ".link.mp4.0123456789ab.part")...)
	if removed, err := SweepStaging(filepath.Join(dir, "missing"), time.Hour); err != nil || removed != nil {
		t.Errorf("a missing folder: %q, %v", removed, err)
	}
}

// The default encoding is preset faster with a 10-frame lookahead; a named preset, faster
// included, reaches libx264 unchanged.
func TestEncoderArguments(t *testing.T) {
	for _, tc := range []struct{ preset, want, absent string }{
		{"", "-preset faster -crf 18 ", ""},
		{"", "-x264-params rc-lookahead=10 ", ""},
		{"faster", "-preset faster -crf 18 ", "-x264-params"},
		{"medium", "-preset medium -crf 18 ", "-x264-params"},
	} {
		dir := t.TempDir()
		argsFile := filepath.Join(dir, "args")
		tools := Tools{FFmpeg: fakeFFmpegRunning(t, `echo "$*" >`+argsFile+`; cat >/dev/null; exit 1`, "libx264", "aac")}
		opts := MP4Options{Path: filepath.Join(dir, "out.mp4"), Width: testW, Height: testH, FPS: testFPS, Preset: tc.preset}
		if err := writeFrames(t, tools, opts, 1); err == nil {
			t.Fatalf("preset %q: the fake ffmpeg failed, Close did not", tc.preset)
		}
		data, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatal(err)
		}
		args := string(data)
		if !strings.Contains(args, tc.want) || tc.absent != "" && strings.Contains(args, tc.absent) {
			t.Errorf("preset %q: ffmpeg ran with %q, want %q and no %q", tc.preset, args, tc.want, tc.absent)
		}
	}
}
