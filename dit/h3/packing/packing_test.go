package packing

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"fastvideo/internal/testutil"
)

type fixtureRequest struct {
	Height, Width      int
	FPS                int      `json:"fps"`
	NumFramesRequested int      `json:"num_frames_requested"`
	NumFramesAligned   int      `json:"num_frames_aligned"`
	LatentFrames       int      `json:"latent_frames"`
	LatentH            int      `json:"latent_h"`
	LatentW            int      `json:"latent_w"`
	RowsPerFrame       int      `json:"rows_per_frame"`
	NumAudioLatents    int      `json:"num_audio_latents"`
	NumTextTokens      int      `json:"num_text_tokens"`
	TextTokenTags      []uint8  `json:"-"`
	KeyframeAnchors    []string `json:"-"`
	SequenceLength     int      `json:"sequence_length"`
	NumTextRows        int      `json:"num_text_rows"`
	NumCondRows        int      `json:"num_condition_video_rows"`
	NumAudioRows       int      `json:"num_audio_rows"`
	NumVideoRowsAll    int      `json:"num_video_rows(incl. cond)"`
	Plan               []struct {
		VideoT float64   `json:"video_t"`
		AudioT float64   `json:"audio_t"`
		Unique []float64 `json:"unique"`
	} `json:"row_timestep_plan(FastH3 grid 5)"`
}

// decodeRequest maps the fixture's snake_case keys (json tags cover the rest).
func decodeRequest(t *testing.T, fx *testutil.Fixture, name string) fixtureRequest {
	var r fixtureRequest
	if err := fx.DecodeConfig(&r, "requests", name); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Tags    []int    `json:"text_token_tags"` // not []uint8: JSON decodes that as base64
		Anchors []string `json:"keyframe_anchors"`
	}
	if err := fx.DecodeConfig(&raw, "requests", name); err != nil {
		t.Fatal(err)
	}
	for _, v := range raw.Tags {
		r.TextTokenTags = append(r.TextTokenTags, uint8(v))
	}
	r.KeyframeAnchors = raw.Anchors
	return r
}

func TestPackingFixtures(t *testing.T) {
	testutil.ForEachFixture(t, "h3_packing", func(t *testing.T, fx *testutil.Fixture) {
		var reqs map[string]any
		if err := fx.DecodeConfig(&reqs, "requests"); err != nil {
			t.Fatal(err)
		}
		for name := range reqs {
			t.Run(name, func(t *testing.T) { checkFixtureRequest(t, fx, name) })
		}
		t.Run("tables", func(t *testing.T) { checkFixtureTables(t, fx) })
	})
}

func checkFixtureRequest(t *testing.T, fx *testutil.Fixture, name string) {
	r := decodeRequest(t, fx, name)
	h, w, err := ResolveTargetCanvas(r.Height, r.Width, [2]float64{16, 9}, VAESpatialRatio)
	if err != nil || h != r.Height || w != r.Width {
		t.Fatalf("ResolveTargetCanvas(%d,%d) = %d,%d,%v", r.Height, r.Width, h, w, err)
	}
	frames, err := ResolveTargetNumFrames(r.NumFramesRequested)
	if err != nil || frames != r.NumFramesAligned {
		t.Fatalf("ResolveTargetNumFrames(%d) = %d,%v want %d", r.NumFramesRequested, frames, err, r.NumFramesAligned)
	}
	g, err := NewGeometry(h, w, frames)
	if err != nil {
		t.Fatal(err)
	}
	if g.LatentFrames != r.LatentFrames || g.LatentHeight != r.LatentH || g.LatentWidth != r.LatentW ||
		g.AudioLatents != r.NumAudioLatents || g.RowsPerFrame() != r.RowsPerFrame {
		t.Fatalf("geometry %+v (rows/frame %d) differs from fixture %+v", g, g.RowsPerFrame(), r)
	}
	var anchors []Anchor
	for _, a := range r.KeyframeAnchors {
		anchors = append(anchors, Anchor(a))
	}
	if len(r.TextTokenTags) != r.NumTextTokens {
		t.Fatalf("fixture has %d tags for %d tokens", len(r.TextTokenTags), r.NumTextTokens)
	}
	l, err := Build(g.Request(r.TextTokenTags, 0, anchors...))
	if err != nil {
		t.Fatal(err)
	}
	if l.SequenceLength != r.SequenceLength || l.NumTextRows != r.NumTextRows || l.NumConditionVideoRows != r.NumCondRows ||
		l.NumAudioRows != r.NumAudioRows || l.NumVideoRows+l.NumConditionVideoRows != r.NumVideoRowsAll {
		t.Fatalf("counts: L=%d text=%d cond=%d audio=%d video=%d; fixture %+v", l.SequenceLength, l.NumTextRows,
			l.NumConditionVideoRows, l.NumAudioRows, l.NumVideoRows, r)
	}

	pre := "out." + name + "."
	pos, shape := fx.F64(t, pre+"position_ids")
	if len(shape) != 2 || shape[0] != l.SequenceLength || shape[1] != 3 {
		t.Fatalf("position_ids shape %v, layout L=%d", shape, l.SequenceLength)
	}
	bad := 0
	for i := 0; i < l.SequenceLength; i++ {
		for a := 0; a < 3; a++ {
			if math.Float64bits(l.PositionIDs[i][a]) != math.Float64bits(pos[3*i+a]) {
				if bad < 5 {
					t.Errorf("position_ids[%d][%d] = %v (0x%x), want %v (0x%x)", i, a, l.PositionIDs[i][a],
						math.Float64bits(l.PositionIDs[i][a]), pos[3*i+a], math.Float64bits(pos[3*i+a]))
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d position coordinates differ (bit-exact required)", bad)
	}
	t.Logf("%d rows: positions bit-exact", l.SequenceLength)

	equalInts(t, "token_tags", u8s(l.TokenTags), ints(t, fx, pre+"token_tags"))
	equalInts(t, "video_indices", i32s(l.VideoIndices), ints(t, fx, pre+"video_indices"))
	equalInts(t, "audio_indices", i32s(l.AudioIndices), ints(t, fx, pre+"audio_indices"))
	equalInts(t, "text_indices", i32s(l.TextIndices), ints(t, fx, pre+"text_indices"))

	for k, step := range r.Plan {
		tv, ta := float32(step.VideoT), float32(step.AudioT)
		uniq, idx := RowTimesteps(l, tv, ta, ConditionVideoTimestep(tv), 1.0)
		wantU, _ := fx.F32(t, fmt.Sprintf("%sstep%d.unique_timesteps", pre, k))
		if len(uniq) != len(wantU) {
			t.Fatalf("step %d: unique %v, want %v", k, uniq, wantU)
		}
		for i := range uniq {
			if math.Float32bits(uniq[i]) != math.Float32bits(wantU[i]) {
				t.Fatalf("step %d: unique %v, want %v (bit-exact)", k, uniq, wantU)
			}
		}
		equalInts(t, fmt.Sprintf("step%d.timestep_indices", k), u8s(idx), ints(t, fx, fmt.Sprintf("%sstep%d.timestep_indices", pre, k)))
	}
}

// checkFixtureTables checks whichever weight-free tables the fixture's JSON
// carries (an extra fixture may carry none).
func checkFixtureTables(t *testing.T, fx *testutil.Fixture) {
	var aspects map[string][2]int
	_ = fx.DecodeConfig(&aspects, "canvas_from_aspect")
	for ratio, want := range aspects {
		var aw, ah float64
		if _, err := fmt.Sscanf(ratio, "%g:%g", &aw, &ah); err != nil {
			t.Fatal(err)
		}
		h, w, err := ResolveCanvasSize(aw, ah)
		if err != nil || h != want[0] || w != want[1] {
			t.Errorf("ResolveCanvasSize(%s) = %d,%d,%v want %v", ratio, h, w, err, want)
		}
	}
	for _, tab := range []struct {
		key string
		fn  func(int) (int, error)
	}{
		{"align_num_frames", AlignNumFrames},
		{"video_latent_num_frames", VideoLatentFrames},
		{"audio_latent_num_frames", func(n int) (int, error) { return AudioLatentFrames(n), nil }},
	} {
		var m map[string]int
		if fx.Config[tab.key] == nil {
			continue
		}
		if err := fx.DecodeConfig(&m, tab.key); err != nil {
			t.Fatal(err)
		}
		for in, want := range m {
			n, _ := strconv.Atoi(in)
			got, err := tab.fn(n)
			if err != nil || got != want {
				t.Errorf("%s(%d) = %d,%v want %d", tab.key, n, got, err, want)
			}
		}
	}
}

func ints(t *testing.T, fx *testutil.Fixture, name string) []int64 {
	v, _ := fx.I64(t, name)
	return v
}

func u8s(v []uint8) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func i32s(v []int32) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func equalInts(t *testing.T, label string, got, want []int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", label, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s[%d] = %d, want %d", label, i, got[i], want[i])
		}
	}
}
