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
// call loads its decoders before the DiT and compiles their programs beside the denoise, so that
// its decode stage's calls compile nothing; its frames (and H3's waveform) are bit for bit those of
// a generator that loads per call (OneResident, which prewarms nothing and whose decode compiles).
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
			if vae, dit := slices.Index(loads, "video_vae"), slices.Index(loads, "dit"); vae < 0 || dit < 0 || vae > dit {
				t.Errorf("loads %v: want the video VAE before the DiT", loads)
			}
			if m.audio && slices.Index(loads, "audio_vae") > slices.Index(loads, "dit") {
				t.Errorf("loads %v: want the audio VAE before the DiT", loads)
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
