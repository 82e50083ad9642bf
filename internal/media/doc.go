// Package media writes the SDK's output files: H.264 (yuv420p) video, optionally muxed with
// AAC audio, in an MP4 container, and probes such files for tests.
//
// Encoding is delegated to an external ffmpeg process fed through its stdin pipe rather than
// to linked codec libraries. That keeps the module free of cgo (the SDK builds with plain
// `go build` and cross-compiles), keeps GPL/patent-encumbered encoders (libx264) out of our
// binary, and reuses the exact encoders the upstream FastVideo and MLX runtimes invoke
// (libx264 CRF 18 yuv420p, AAC 192 kb/s; preset faster with a 10-frame lookahead by default, medium as
// upstream on request: see DefaultPreset), so outputs are comparable. The cost is
// a runtime dependency, which is why FindTools and Tools.Check validate it before any model work
// starts and name the fix (apt-get install ffmpeg, or FASTVIDEO_FFMPEG=/path/to/ffmpeg).
//
// Frames are streamed as raw rgb24 as they are decoded, so a long clip never has to be held in
// memory. The audio track, small next to the frames, is given whole before the first frame (the
// SDK decodes it before the video) and reaches the same ffmpeg run as a file, so H.264 and AAC
// are encoded and muxed in one pass; MP4Writer explains why a file works where a late pipe did
// not.
//
// Outputs are written to hidden temporary files next to the target and renamed into place
// only after ffmpeg succeeded, so a crash, an error or a cancelled context never leaves a
// partial file at the target path; on failure the temporaries are removed, ffmpeg is killed
// and the error carries the tail of ffmpeg's stderr.
package media
