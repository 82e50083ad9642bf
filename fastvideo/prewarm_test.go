package fastvideo

import (
	"context"
	"errors"
	"slices"
	"testing"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/testutil"
)

// TestDecoderPrewarm: under the default memory policy (the tiny models' VAEs are kept) the first
// call preloads its decoders and the DiT beside Condition and compiles the decoders' programs
// beside the denoise, so that its decode stage's calls compile nothing; its frames (and H3's
// waveform) are bit for bit those of a generator that loads per call (OneResident, which prewarms
// nothing and whose decode compiles).
func TestDecoderPrewarm(t *testing.T) {
	for _, m := range []struct {
		name  string
		open  func(...Option) (*VideoGenerator, error)
		ref   *sharedGenerator
		audio bool
	}{{"tiny-h3", newTiny, &shared, true}, {"tiny-wan", newTinyWan, &wanShared, false}} {
		t.Run(m.name, func(t *testing.T) {
			generate := func(g *VideoGenerator) (*Result, int64) {
				t.Helper()
				var start, decodeCompiles int64 = 0, -1
				req := Request{Prompt: "a red fox", Seed: Ptr[int64](5), SkipSave: true, ReturnFrames: true, ReturnAudio: m.audio,
					Progress: func(e Event) {
						switch {
						case e.Stage != StageDecode:
						case e.Kind == StageStart:
							start = graphexec.CallCompiles()
						case e.Kind == StageEnd:
							decodeCompiles = graphexec.CallCompiles() - start
						}
					}}
				res, err := g.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return res, decodeCompiles
			}
			g := openGenerator(t, m.open)
			var loads []string
			g.loadHook = func(c string) { loads = append(loads, c) }
			got, compiles := generate(g)
			if compiles != 0 {
				t.Errorf("the first call's decode stage compiled %d program(s), want 0 (all in the denoise)", compiles)
			}
			// Preloaded beside Condition: started before the text encoder opens on the prompt.
			kept := []string{"dit", "video_vae"}
			if m.audio {
				kept = append(kept, "audio_vae")
			}
			for _, c := range kept {
				if i, te := slices.Index(loads, c), slices.Index(loads, "text_encoder"); i < 0 || te < 0 || i > te {
					t.Errorf("loads %v: want %s preloaded before the text encoder", loads, c)
				}
			}
			want, refCompiles := generate(m.ref.get(t))
			if refCompiles == 0 {
				t.Errorf("the OneResident decode stage compiled nothing: the check above proves nothing")
			}
			if !slices.EqualFunc(got.Frames, want.Frames, slices.Equal[[]byte]) || len(got.Frames) == 0 {
				t.Errorf("%d frames differ from the %d of a run without the prewarm", len(got.Frames), len(want.Frames))
			}
			if len(got.Audio) != len(want.Audio) {
				t.Fatalf("%d audio channels, want %d", len(got.Audio), len(want.Audio))
			}
			for i := range got.Audio {
				if !testutil.SameBits(got.Audio[i], want.Audio[i]) {
					t.Errorf("audio channel %d differs from a run without the prewarm", i)
				}
			}
		})
	}
}

// TestDecoderPrewarmCancel: a first call cancelled during its denoise ends with the cancellation
// (its decoder compiles end with it), and the next call on the same generator decodes.
func TestDecoderPrewarmCancel(t *testing.T) {
	g := openGenerator(t, newTiny)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := Request{Prompt: "a red fox", SkipSave: true, ReturnFrames: true, ReturnAudio: true}
	req.Progress = func(e Event) {
		if e.Kind == DenoiseStep {
			cancel()
		}
	}
	if _, err := g.Generate(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate cancelled during the denoise = %v, want context.Canceled", err)
	}
	req.Progress = nil
	res, err := g.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Frames) == 0 || len(res.Audio) == 0 || len(res.Warnings) != 0 {
		t.Errorf("the call after the cancelled one: %d frames, %d audio channels, warnings %q", len(res.Frames), len(res.Audio), res.Warnings)
	}
}

// TestPreloadKeptAfterFailedCondition: a first call cancelled in Condition, once its DiT preload
// has started, ends with the cancellation after the preload ends; the next call finds the DiT
// resident (no second load) and makes the latents of a generator that never failed.
func TestPreloadKeptAfterFailedCondition(t *testing.T) {
	g := openGenerator(t, newTiny, WithMemoryPolicy(AllResident))
	ctx, cancel := context.WithCancel(context.Background())
	var loads []string
	g.loadHook = func(c string) {
		loads = append(loads, c)
		if c == "dit" {
			cancel()
		}
	}
	req := Request{Prompt: "a red fox", Seed: Ptr[int64](7)}
	if _, err := g.Generate(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call cancelled during its DiT preload: %v, want context.Canceled", err)
	}
	res := latentsOnly(t, g, req)
	if n := slices.Index(loads, "dit"); n < 0 || slices.Index(loads[n+1:], "dit") >= 0 {
		t.Errorf("loads %v: want the DiT loaded once, by the first call's preload", loads)
	}
	ref := seed7Latents(t)
	if !testutil.SameBits(res.Latents.Video, ref.Video) || !testutil.SameBits(res.Latents.Audio, ref.Audio) {
		t.Error("the latents after a failed first call differ from a generator's that never failed")
	}
}
