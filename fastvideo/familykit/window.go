package familykit

import (
	"fmt"
	"math"

	"fastvideo/attention"
	"fastvideo/fastvideo/api"
)

// AttentionWindow is what a request asks of windowed self-attention (a family's
// Options.AttentionWindow): FastVideo's MLX Wan runtime's FASTVIDEO_MLX_WINDOW and
// FASTVIDEO_MLX_WINDOW_SINK (fastvideo/mlx_runtime/windowed_attention.py). Query token i sees key j
// when |i − j| ≤ Tokens/2 or j < Sink, over the flattened (frame-major) token index, so 2k·(tokens a
// latent frame) spans about ±k frames. An off-default research knob: the checkpoints are
// dense-trained.
type AttentionWindow struct {
	// Tokens is the window width in tokens; 0 keeps the model's attention (dense or VSA).
	Tokens int
	// Sink is the number of leading tokens every query sees (0: none).
	Sink int
}

// ResolveWindow validates a request's window for self-attention sequences of at least minTokens
// tokens (the run's smallest forward) and returns the attention's window, nil when the request asks
// none. vsaAsked says the request also asks for Video Sparse Attention, which excludes a window. Bad
// knobs are *api.RequestErrors for attention_window or attention_window_sink.
func ResolveWindow(w *AttentionWindow, minTokens int, vsaAsked bool) (*attention.Window, error) {
	if w == nil {
		return nil, nil
	}
	switch {
	case w.Tokens < 0:
		return nil, &api.RequestError{Field: "attention_window", Value: w.Tokens, Allowed: "0 (off) or a window of 1 token or more"}
	case w.Tokens == 0 && w.Sink != 0:
		return nil, &api.RequestError{Field: "attention_window_sink", Value: w.Sink, Allowed: "0 unless attention_window sets a window"}
	case w.Tokens == 0:
		return nil, nil
	case vsaAsked:
		return nil, &api.RequestError{Field: "attention_window", Value: w.Tokens,
			Allowed: "0 when Video Sparse Attention is asked for: windowed and block-sparse attention exclude each other (drop one)"}
	case w.Sink < 0 || w.Sink > minTokens:
		return nil, &api.RequestError{Field: "attention_window_sink", Value: w.Sink,
			Allowed: fmt.Sprintf("0 to %d (the tokens of the run's smallest DiT forward)", minTokens)}
	}
	return &attention.Window{Tokens: w.Tokens, Sink: w.Sink}, nil
}

// WindowRow is the plan's attention row of a window over forwards of tokens tokens, tokensPerFrame a
// latent frame.
func WindowRow(w attention.Window, tokensPerFrame, tokens int) string {
	if w.Dense(tokens) {
		return fmt.Sprintf("dense: the attention window of %d tokens covers the %d-token sequence", w.Tokens, tokens)
	}
	frames := math.Round(float64(w.Half())/float64(max(1, tokensPerFrame))*10) / 10
	return fmt.Sprintf("windowed: ±%d tokens (≈ ±%g frames), sink %d; off-default research knob, dense-trained checkpoints drift",
		w.Half(), frames, w.Sink)
}

// WindowFineStage names how a window's key tiles are attended in this build at dtype: read in place
// by the Triton window kernel (the GPU build, bf16; attention.TritonWindow) or gathered.
func WindowFineStage(dtype api.DType) string {
	if attention.WindowKernel() && dtype != api.F32 {
		return "read in place (Triton kernel)"
	}
	return "gathered"
}

// WindowWarning is what a windowed run reports (upstream logs it once when the window turns on).
func WindowWarning(w attention.Window) string {
	return fmt.Sprintf("windowed self-attention (±%d tokens, sink %d) is an off-default research knob: the checkpoints were trained "+
		"with dense attention and the video's structure drifts from the dense run's (FastVideo measured a structural agreement with "+
		"dense of 0.25 at ±3 latent frames, 0.03 at ±5)", w.Half(), w.Sink)
}
