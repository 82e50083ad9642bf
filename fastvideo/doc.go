// Package fastvideo is the SDK's entry point: it plans, validates and runs text-to-video generations,
// mirroring FastVideo's VideoGenerator, for two model families: MiniMax H3 and its 4-step FastH3
// students (video with stereo audio), and Wan (Wan2.1 T2V 1.3B/14B, Wan2.2 TI2V-5B and the 3-step
// FastWan DMD students; video only).
//
//	g, err := fastvideo.New(ctx, "/models/FastH3")          // or "tiny-h3": random weights, no files
//	defer g.Close()
//	res, err := g.Generate(ctx, fastvideo.Request{Prompt: "A red fox runs through snow.", OutputPath: "fox.mp4"})
//
// The same calls run a Wan snapshot folder ("/models/FastWan2.1-T2V-1.3B-Diffusers") or "tiny-wan".
// The family is read from the folder (model_index.json); requests are validated by the family's rules
// and the family's pipeline runs behind the same Generate, events, options and result.
//
// A Wan generation runs: validate; condition (UMT5's Unigram tokenizer, </s> appended, the UMT5
// encoder, its output zero-padded to 512 rows, for the prompt and, with classifier-free guidance,
// the negative prompt; optional prompt cache); denoise (UniPC at the model's flow shift with two
// forwards per step under guidance, or the FastWan DMD ladder 1000/757/522 with x0 prediction and
// re-noising, optionally warped); video decode (the causal Wan VAE one latent frame at a time,
// streamed into the H.264 encoder); mux (video only).
//
// A generation runs in phases, each owning one heavyweight component (by default only one is loaded
// at a time): validate (request, model files, ffmpeg, backend; nothing loaded), condition (Qwen3
// tokenizer, Qwen3-VL text stack streamed layer by layer, optional prompt cache), denoise (the joint
// audio-video DiT, with the video ladder at shift 12 and the audio ladder at shift 3, AdaLN tables
// computed once for the visited timesteps), audio decode, video decode (streamed clip by clip into
// the encoder, which was started with the audio track, so one ffmpeg run writes H.264 and AAC) and
// mux (the encoders' flush; temporary file, then a final name that never replaces an existing
// file).
//
// Requests follow FastVideo's "unset means the preset's value" rule: zero fields take the model
// preset's defaults (Seed, where 0 is meaningful, is a pointer). Invalid input is reported as a
// *RequestError naming the field, the value and what is allowed, before anything is loaded.
//
// Randomness: the initial noise comes from GaussianNoise, a documented Go generator. It cannot
// reproduce PyTorch's torch.randn stream, so a Go run and a Python run with the same seed differ; to
// reproduce a reference run, inject its noise with Request.VideoNoise and, for MiniMax H3, the
// family option h3.Options.AudioNoise (Wan DMD: Request.RenoiseNoise for the draws between steps).
//
// The built-in "tiny-h3" and "tiny-wan" models are the two architectures at toy width with
// deterministic random weights made in memory (tiny-wan also with a toy tokenizer); they run the
// whole pipeline in seconds on a CPU and produce noise. "fasth3", "h3", "wan2.1-t2v-1.3b",
// "fastwan2.1-t2v-1.3b", "wan2.2-ti2v-5b", ... are the released specifications, usable with Plan
// without any download.
package fastvideo
