package media

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProbeInfo describes a media file as ffprobe sees it. Video or Audio is nil when the file
// has no such stream; only the first stream of each kind is reported.
type ProbeInfo struct {
	FormatName string  // ffprobe's container name, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
	Duration   float64 // container duration in seconds
	Video      *VideoInfo
	Audio      *AudioInfo
}

// VideoInfo describes a video stream.
type VideoInfo struct {
	Codec       string // e.g. "h264"
	PixelFormat string // e.g. "yuv420p"
	Width       int
	Height      int
	// Frames is the container's frame count (nb_frames), or the packet count when the
	// container does not store one.
	Frames     int
	FPS        float64 // average frame rate
	FrameRate  string  // the same as ffprobe's rational, e.g. "24/1" or "24000/1001"
	Duration   float64 // seconds
	ColorSpace string  // e.g. "bt709"
	ColorRange string  // "tv" (limited) or "pc" (full)
}

// AudioInfo describes an audio stream.
type AudioInfo struct {
	Codec         string // e.g. "aac"
	Channels      int
	ChannelLayout string // e.g. "stereo"
	SampleRate    int
	Duration      float64 // seconds
}

type ffprobeStream struct {
	CodecType     string `json:"codec_type"`
	CodecName     string `json:"codec_name"`
	PixFmt        string `json:"pix_fmt"`
	Width         int    `json:"width"`
	Height        int    `json:"height"`
	AvgFrameRate  string `json:"avg_frame_rate"`
	RFrameRate    string `json:"r_frame_rate"`
	Duration      string `json:"duration"`
	NbFrames      string `json:"nb_frames"`
	NbReadPackets string `json:"nb_read_packets"`
	SampleRate    string `json:"sample_rate"`
	Channels      int    `json:"channels"`
	ChannelLayout string `json:"channel_layout"`
	ColorSpace    string `json:"color_space"`
	ColorRange    string `json:"color_range"`
}

type ffprobeOutput struct {
	Streams []ffprobeStream `json:"streams"`
	Format  struct {
		FormatName string `json:"format_name"`
		Duration   string `json:"duration"`
	} `json:"format"`
}

// Probe runs t.FFprobe on path. It reads every packet to count frames, so it is meant for
// tests and validation of finished outputs, not for large archives.
func (t Tools) Probe(path string) (*ProbeInfo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("media: probe %q: %w", path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("media: probe: %w", err)
	}
	if t.FFprobe == "" {
		return nil, fmt.Errorf("media: probe: no ffprobe was found next to ffmpeg or on PATH (%w); "+
			"install ffmpeg (it ships ffprobe; Debian/Ubuntu: apt-get install ffmpeg) or set %s", ErrNotFound, EnvFFprobe)
	}
	ffprobe := t.FFprobe
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ffprobe, "-v", "error", "-print_format", "json",
		"-show_streams", "-show_format", "-count_packets", "file:"+abs)
	var stdout bytes.Buffer
	stderr := newTailBuffer()
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		return nil, &FFmpegError{Op: "probing", Path: abs, Err: err, Stderr: stderr.Tail()}
	}
	var out ffprobeOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, &FFmpegError{Op: "parsing ffprobe JSON", Path: abs, Err: err, Stderr: stderr.Tail()}
	}
	info := &ProbeInfo{FormatName: out.Format.FormatName, Duration: parseFloat(out.Format.Duration)}
	for _, s := range out.Streams {
		switch {
		case s.CodecType == "video" && info.Video == nil:
			rate := s.AvgFrameRate
			if parseRational(rate) == 0 {
				rate = s.RFrameRate
			}
			frames, _ := strconv.Atoi(s.NbFrames)
			if frames == 0 {
				frames, _ = strconv.Atoi(s.NbReadPackets)
			}
			info.Video = &VideoInfo{
				Codec: s.CodecName, PixelFormat: s.PixFmt, Width: s.Width, Height: s.Height,
				Frames: frames, FPS: parseRational(rate), FrameRate: rate,
				Duration: parseFloat(s.Duration), ColorSpace: s.ColorSpace, ColorRange: s.ColorRange,
			}
		case s.CodecType == "audio" && info.Audio == nil:
			sr, _ := strconv.Atoi(s.SampleRate)
			info.Audio = &AudioInfo{
				Codec: s.CodecName, Channels: s.Channels, ChannelLayout: s.ChannelLayout,
				SampleRate: sr, Duration: parseFloat(s.Duration),
			}
		}
	}
	return info, nil
}

// parseFloat reads ffprobe's numeric strings; "N/A" or absent fields become 0.
func parseFloat(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return v
}

// parseRational reads "num/den" (or a plain number); "0/0" and malformed values become 0.
func parseRational(s string) float64 {
	num, den, ok := strings.Cut(s, "/")
	if !ok {
		return parseFloat(s)
	}
	n, d := parseFloat(num), parseFloat(den)
	if d == 0 {
		return 0
	}
	return n / d
}
