package packing

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"

	"fastvideo/internal/testutil"
)

// fixtureRequest is one request of the packing fixture, under the fixture's keys: its inputs and
// the counts FastVideo's packing produced (numbers), and its lists.
type fixtureRequest struct {
	name    string
	numbers map[string]any
	lists   struct {
		TextTokenTags   []uint8Value `json:"text_token_tags"`
		KeyframeAnchors []Anchor     `json:"keyframe_anchors"`
		Plan            []struct {
			VideoT float64 `json:"video_t"`
			AudioT float64 `json:"audio_t"`
		} `json:"row_timestep_plan(FastH3 grid 5)"`
	}
}

// uint8Value decodes one JSON number: a []uint8 field would expect base64.
type uint8Value uint8

func decodeRequest(t *testing.T, fx *testutil.Fixture, name string) *fixtureRequest {
	t.Helper()
	r := &fixtureRequest{name: name}
	if err := errors.Join(fx.DecodeConfig(&r.numbers, "requests", name), fx.DecodeConfig(&r.lists, "requests", name)); err != nil {
		t.Fatal(err)
	}
	return r
}

// int is the fixture's integer under key.
func (r *fixtureRequest) int(t *testing.T, key string) int {
	t.Helper()
	v, ok := r.numbers[key].(float64)
	if !ok {
		t.Fatalf("fixture request %s: no number %q", r.name, key)
	}
	return int(v)
}

// checkCounts compares each of our counts with the fixture's under its key.
func (r *fixtureRequest) checkCounts(t *testing.T, what string, got map[string]int) {
	t.Helper()
	for key, n := range got {
		if want := r.int(t, key); n != want {
			t.Errorf("%s %s = %d, fixture %d", what, key, n, want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func (r *fixtureRequest) textTokenTags() []uint8 {
	tags := make([]uint8, len(r.lists.TextTokenTags))
	for i, v := range r.lists.TextTokenTags {
		tags[i] = uint8(v)
	}
	return tags
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
	height, width := r.int(t, "height"), r.int(t, "width")
	h, w, err := ResolveTargetCanvas(height, width, [2]float64{16, 9}, VAESpatialRatio)
	if err != nil || h != height || w != width {
		t.Fatalf("ResolveTargetCanvas(%d,%d) = %d,%d,%v", height, width, h, w, err)
	}
	requested, aligned := r.int(t, "num_frames_requested"), r.int(t, "num_frames_aligned")
	frames, err := ResolveTargetNumFrames(requested)
	if err != nil || frames != aligned {
		t.Fatalf("ResolveTargetNumFrames(%d) = %d,%v want %d", requested, frames, err, aligned)
	}
	g, err := NewGeometry(h, w, frames)
	if err != nil {
		t.Fatal(err)
	}
	r.checkCounts(t, "geometry", map[string]int{
		"latent_frames": g.LatentFrames, "latent_h": g.LatentHeight, "latent_w": g.LatentWidth,
		"num_audio_latents": g.AudioLatents, "rows_per_frame": g.RowsPerFrame(),
	})
	tags := r.textTokenTags()
	if n := r.int(t, "num_text_tokens"); len(tags) != n {
		t.Fatalf("fixture has %d tags for %d tokens", len(tags), n)
	}
	l, err := Build(g.Request(tags, 0, r.lists.KeyframeAnchors...))
	if err != nil {
		t.Fatal(err)
	}
	r.checkCounts(t, "layout", map[string]int{
		"sequence_length": l.SequenceLength, "num_text_rows": l.NumTextRows,
		"num_condition_video_rows": l.NumConditionVideoRows, "num_audio_rows": l.NumAudioRows,
		"num_video_rows(incl. cond)": l.NumVideoRows + l.NumConditionVideoRows,
	})

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

	for k, step := range r.lists.Plan {
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
