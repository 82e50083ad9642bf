package fastvideo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/internal/testutil"
)

// fakeFamily is a third model family written in the test: one built-in model, "fake-tiny", whose
// stages paint solid-colour frames (frame i has the colour fakeColour(i)), no GoMLX and no audio.
// It proves that a family plugs into New, Generate and Plan through the contract alone. A non-nil
// audioErr is what its DecodeAudio returns.
type fakeFamily struct{ audioErr error }

func (fakeFamily) Name() string                { return "fake" }
func (fakeFamily) Builtins() []string          { return []string{"fake-tiny"} }
func (fakeFamily) Detect(string) (bool, error) { return false, nil }
func (fakeFamily) FolderLayout() string        { return "a fake snapshot holds fake.json" }
func (fakeFamily) ReadFolder(dir string) (family.Model, error) {
	return nil, fmt.Errorf("no fake folders")
}

func (f fakeFamily) Lookup(name string) (family.Model, bool) {
	if name != "fake-tiny" {
		return nil, false
	}
	return fakeModel{f.audioErr}, true
}

type fakeModel struct{ audioErr error }

func (fakeModel) Info() family.ModelInfo {
	return family.ModelInfo{Name: "fake-tiny", Family: "fake", Variant: "fake-tiny", DefaultPreset: "fake",
		Presets: []family.Preset{{Name: "fake", Height: 32, Width: 48, NumFrames: 5, FPS: 10, Steps: 2, GuidanceScale: 1}}}
}

func (m fakeModel) Resolve(req api.Request, needPrompt bool) (family.Resolution, error) {
	preset, r, err := family.ResolveCommon(m.Info(), req, needPrompt)
	if err != nil {
		return nil, err
	}
	if r.Height, r.Width, err = familykit.ResolveSize(req, preset, familykit.SizeRule{HeightMultiple: 16, WidthMultiple: 16, MaxSide: 256}); err != nil {
		return nil, err
	}
	r.NumFrames = familykit.OrPreset(req.NumFrames, preset.NumFrames)
	if r.NumFrames < 1 || r.NumFrames > 50 {
		return nil, &api.RequestError{Field: "num_frames", Value: r.NumFrames, Allowed: "1 to 50"}
	}
	r.RequestedFrames, r.FPS, r.Steps, r.Guidance = r.NumFrames, preset.FPS, preset.Steps, 1
	return fakeResolution{r}, nil
}

func (m fakeModel) Open(*family.Engine) (family.Components, error) {
	return fakeComponents{m.audioErr}, nil
}

type fakeResolution struct{ r *family.Resolved }

func (f fakeResolution) Common() *family.Resolved { return f.r }

func (f fakeResolution) Plan(api.DType) (*api.Plan, error) {
	r := f.r
	return &api.Plan{Model: r.Model.Name, Preset: r.Preset, Family: r.Model.Family, Height: r.Height, Width: r.Width,
		CanvasHeight: r.Height, CanvasWidth: r.Width, RequestedFrames: r.RequestedFrames, NumFrames: r.NumFrames, FPS: r.FPS,
		DurationSeconds: float64(r.NumFrames) / float64(r.FPS), Steps: r.Steps, Seed: r.Seed, ForwardsPerStep: 1}, nil
}

type fakeComponents struct{ audioErr error }

func (fakeComponents) Describe() string { return "fake-tiny (solid colours)" }
func (fakeComponents) Check() error     { return nil }
func (fakeComponents) Close() error     { return nil }

func (c fakeComponents) Start(r family.Resolution, s *family.Session) (family.Stages, error) {
	return &fakeStages{r: r.(fakeResolution), s: s, audioErr: c.audioErr}, nil
}

type fakeStages struct {
	r        fakeResolution
	s        *family.Session
	audioErr error
}

func (f *fakeStages) Condition(context.Context) error {
	p, err := f.r.Plan(api.DTypeAuto)
	f.s.Result.Plan = p
	return err
}

func (f *fakeStages) Denoise(ctx context.Context) error {
	return f.s.DenoiseLoop(ctx, f.r.r.Steps, func(int) error { return nil })
}

func (f *fakeStages) DecodeAudio(context.Context) ([][]float32, error) { return nil, f.audioErr }

// Decode paints the frames in clips of two.
func (f *fakeStages) Decode(_ context.Context, sink family.FrameSink) error {
	c := f.r.r
	for first := 0; sink != nil && first < c.NumFrames; first += 2 {
		n := min(2, c.NumFrames-first)
		frames := family.Frames{Width: c.Width, Height: c.Height, Count: n, RGB: make([]byte, 0, n*c.Width*c.Height*3)}
		for i := first; i < first+n; i++ {
			col := fakeColour(i)
			for p := 0; p < c.Width*c.Height; p++ {
				frames.RGB = append(frames.RGB, col[:]...)
			}
		}
		if err := sink(frames); err != nil {
			return err
		}
	}
	return nil
}

func fakeColour(i int) [3]byte { return [3]byte{byte(40 * i), 200, byte(255 - 30*i)} }

// TestFakeFamily runs the third family through New, Plan and Generate to an MP4.
func TestFakeFamily(t *testing.T) {
	ctx := context.Background()
	opt := WithFamily(fakeFamily{})
	p, err := Plan("fake-tiny", Request{Height: 64, Width: 80}, opt)
	if err != nil || p.Family != "fake" || p.Height != 64 || p.Width != 80 || p.NumFrames != 5 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	var re *RequestError
	if _, err := Plan("fake-tiny", Request{Height: 60, Width: 80}, opt); !errors.As(err, &re) || re.Field != "height" {
		t.Errorf("a fake height of 60: %v", err)
	}
	if _, err := Plan("fake-tiny", Request{}); !errors.As(err, &re) || re.Field != "model" {
		t.Errorf("fake-tiny without its family: %v", err)
	}
	g, err := New(ctx, "fake-tiny", opt, WithBackend(testutil.BackendSpec()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir := t.TempDir()
	var events []Event
	res, err := g.Generate(ctx, Request{Prompt: "Solid colours", OutputPath: dir, ReturnFrames: true,
		Progress: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputPath != filepath.Join(dir, "solid_colours.mp4") || res.Plan == nil || res.Plan.Family != "fake" || res.SampleRate != 0 {
		t.Fatalf("result %+v", res)
	}
	info, err := probe(res.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	if v := info.Video; v == nil || v.Width != 48 || v.Height != 32 || v.Frames != 5 || v.FPS != 10 || info.Audio != nil {
		t.Fatalf("probe %+v %+v, want 48x32, 5 frames at 10 fps, no audio", info.Video, info.Audio)
	}
	if len(res.Frames) != 5 || res.Frames[3][0] != fakeColour(3)[0] || res.Frames[3][2] != fakeColour(3)[2] {
		t.Errorf("%d frames returned", len(res.Frames))
	}
	checkRunEvents(t, events, "validate condition denoise decode mux", 2, 5, func(prev, done int) bool { return done == min(prev+2, 5) })
}

// badSizeFilter halves the frames' width.
type badSizeFilter struct{}

func (badSizeFilter) Name() string { return "bad-size" }
func (badSizeFilter) Filter(_ context.Context, in Frames) (Frames, error) {
	return Frames{Width: in.Width / 2, Height: in.Height, Count: in.Count, RGB: in.RGB[:len(in.RGB)/2]}, nil
}
func (badSizeFilter) Flush(context.Context) (Frames, error) { return Frames{}, nil }

// TestFilterOfWrongSize: a filter that changes the frame size fails the run, leaving no file.
func TestFilterOfWrongSize(t *testing.T) {
	g, err := New(context.Background(), "fake-tiny", WithFamily(fakeFamily{}), WithFrameFilter(badSizeFilter{}), WithBackend(testutil.BackendSpec()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir := t.TempDir()
	if _, err := g.Generate(context.Background(), Request{Prompt: "x", OutputPath: dir}); err == nil {
		t.Fatal("a filter of the wrong size did not fail the run")
	} else {
		t.Log(err)
	}
	if names := testutil.DirNames(t, dir); len(names) != 0 {
		t.Errorf("files left: %v", names)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// TestAudioDecodeFailure: a DecodeAudio error fails the run before the encoder starts, leaving no
// file and no output folder behind.
func TestAudioDecodeFailure(t *testing.T) {
	g, err := New(context.Background(), "fake-tiny", WithFamily(fakeFamily{audioErr: errors.New("the audio VAE gave up")}), WithBackend(testutil.BackendSpec()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir := t.TempDir()
	_, err = g.Generate(context.Background(), Request{Prompt: "x", OutputPath: filepath.Join(dir, "made") + string(filepath.Separator)})
	if err == nil || !strings.Contains(err.Error(), "fastvideo: audio decode: the audio VAE gave up") {
		t.Fatalf("Generate: %v, want the audio decode's error", err)
	}
	if names := testutil.DirNames(t, dir); len(names) != 0 {
		t.Errorf("files left: %v", names)
	}
}
