// Package fastvideo is the SDK's entry point: it plans, validates and runs text-to-video+audio
// generations with MiniMax H3 and its 4-step FastH3 students, mirroring FastVideo's VideoGenerator.
//
//	g, err := fastvideo.New(ctx, "/models/FastH3")          // or "tiny-h3": random weights, no files
//	defer g.Close()
//	res, err := g.Generate(ctx, fastvideo.Request{Prompt: "A red fox runs through snow.", OutputPath: "fox.mp4"})
//
// A generation runs in phases, each owning one heavyweight component (by default only one is loaded
// at a time): validate (request, model files, ffmpeg, backend; nothing loaded), condition (Qwen3
// tokenizer, Qwen3-VL text stack streamed layer by layer, optional prompt cache), denoise (the joint
// audio-video DiT, with the video ladder at shift 12 and the audio ladder at shift 3, AdaLN tables
// computed once for the visited timesteps), audio decode, video decode (streamed clip by clip into
// the H.264 encoder) and mux (AAC track; temporary file, then a final name that never replaces an
// existing file).
//
// Requests follow FastVideo's "unset means the preset's value" rule: zero fields take the model
// preset's defaults (Seed, where 0 is meaningful, is a pointer). Invalid input is reported as a
// *RequestError naming the field, the value and what is allowed, before anything is loaded.
//
// Randomness: the initial noise comes from GaussianNoise, a documented Go generator. It cannot
// reproduce PyTorch's torch.randn stream, so a Go run and a Python run with the same seed differ; to
// reproduce a reference run, inject its noise with Request.VideoNoise and Request.AudioNoise.
//
// The built-in "tiny-h3" model is the H3 architecture at toy width with deterministic random
// weights made in memory; it runs the whole pipeline in seconds on a CPU and produces noise.
// "fasth3" and "h3" are the released specifications, usable with Plan without any download.
package fastvideo
