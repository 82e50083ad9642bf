package packing

import (
	"fmt"
	"math"
	"testing"

	"fastvideo/internal/testutil"
	"fastvideo/vae/h3video"
)

const fl2vaGenerator = "dit/h3/packing/testdata/gen_fl2va.py"

// TestKeyframeResizeFixture pins prepare_keyframe_image's geometry (resize size, crop box, or no
// resampling at all) on several aspect ratios, first (stretched) and second (cover-and-crop)
// keyframes alike.
func TestKeyframeResizeFixture(t *testing.T) {
	testutil.ForEachPendingFixture(t, "h3_fl2va", fl2vaGenerator, func(t *testing.T, fx *testutil.Fixture) {
		var cases map[string]struct {
			SrcWidth  int   `json:"src_width"`
			SrcHeight int   `json:"src_height"`
			Width     int   `json:"width"`
			Height    int   `json:"height"`
			Stretch   bool  `json:"stretch"`
			Resize    []int `json:"resize"`
			Crop      []int `json:"crop"`
			Identity  bool  `json:"identity"`
		}
		if err := fx.DecodeConfig(&cases, "keyframes"); err != nil {
			t.Fatal(err)
		}
		for name, c := range cases {
			got, err := PlanKeyframeResize(c.SrcWidth, c.SrcHeight, c.Width, c.Height, c.Stretch)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.Identity != c.Identity {
				t.Errorf("%s: identity %v, upstream %v", name, got.Identity, c.Identity)
				continue
			}
			if c.Identity {
				continue
			}
			if got.ResizeWidth != c.Resize[0] || got.ResizeHeight != c.Resize[1] {
				t.Errorf("%s: resize to %dx%d, upstream %v", name, got.ResizeWidth, got.ResizeHeight, c.Resize)
			}
			wantCrop := []int{0, 0, c.Width, c.Height}
			if c.Crop != nil {
				wantCrop = c.Crop
			}
			gotCrop := []int{got.CropLeft, got.CropTop, got.CropLeft + c.Width, got.CropTop + c.Height}
			if fmt.Sprint(gotCrop) != fmt.Sprint(wantCrop) {
				t.Errorf("%s: crop box %v, upstream %v", name, gotCrop, wantCrop)
			}
		}
	})
}

// TestFL2VALayoutFixture checks the packed layouts with first, last and both keyframes (and none)
// bit for bit, and the per-row timesteps with the condition rows at max(tv, 0.999).
func TestFL2VALayoutFixture(t *testing.T) {
	testutil.ForEachPendingFixture(t, "h3_fl2va", fl2vaGenerator, func(t *testing.T, fx *testutil.Fixture) {
		var layouts map[string]struct {
			Anchors       []Anchor `json:"anchors"`
			Tags          []int    `json:"text_token_tags"`
			T             int      `json:"latent_frames"`
			H             int      `json:"latent_height"`
			W             int      `json:"latent_width"`
			Audio         int      `json:"audio_latents"`
			Patch         [3]int   `json:"patch_size"`
			NumCondition  int      `json:"num_condition_video_rows"`
			SequenceLenth int      `json:"sequence_length"`
			Steps         []struct {
				Video float64 `json:"video_timestep"`
				Audio float64 `json:"audio_timestep"`
			} `json:"steps"`
		}
		if err := fx.DecodeConfig(&layouts, "layouts"); err != nil {
			t.Fatal(err)
		}
		for name, c := range layouts {
			tags := make([]uint8, len(c.Tags))
			for i, v := range c.Tags {
				tags[i] = uint8(v)
			}
			l, err := Build(Request{TextTokenTags: tags, LatentFrames: c.T, LatentHeight: c.H, LatentWidth: c.W,
				AudioLatents: c.Audio, PatchSize: c.Patch, Keyframes: c.Anchors})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if l.SequenceLength != c.SequenceLenth || l.NumConditionVideoRows != c.NumCondition {
				t.Fatalf("%s: %d rows (%d condition), upstream %d (%d)", name, l.SequenceLength, l.NumConditionVideoRows,
					c.SequenceLenth, c.NumCondition)
			}
			checkLayoutTensors(t, fx, name, l)
			for k, st := range c.Steps {
				tv, ta := float32(st.Video), float32(st.Audio)
				uniq, idx := RowTimesteps(l, tv, ta, ConditionVideoTimestep(tv), 1)
				wantU, _ := fx.F32(t, fmt.Sprintf("out.%s.step%d.unique_timesteps", name, k))
				testutil.AssertBitExact(t, fmt.Sprintf("%s step %d unique timesteps", name, k), uniq, wantU)
				wantI, _ := fx.I64(t, fmt.Sprintf("out.%s.step%d.timestep_indices", name, k))
				for i := range wantI {
					if int64(idx[i]) != wantI[i] {
						t.Fatalf("%s step %d: row %d timestep index %d, upstream %d", name, k, i, idx[i], wantI[i])
					}
				}
			}
		}
	})
}

func checkLayoutTensors(t *testing.T, fx *testutil.Fixture, name string, l *Layout) {
	t.Helper()
	pos, _ := fx.F64(t, "out."+name+".position_ids")
	for i, q := range l.PositionIDs {
		for a := 0; a < 3; a++ {
			if q[a] != pos[3*i+a] {
				t.Fatalf("%s: position %d axis %d = %v, upstream %v", name, i, a, q[a], pos[3*i+a])
			}
		}
	}
	tags, _ := fx.I64(t, "out."+name+".token_tags")
	for i, v := range tags {
		if int64(l.TokenTags[i]) != v {
			t.Fatalf("%s: row %d tag %d, upstream %d", name, i, l.TokenTags[i], v)
		}
	}
	for _, idx := range []struct {
		key string
		got []int32
	}{{"video_indices", l.VideoIndices}, {"audio_indices", l.AudioIndices}, {"text_indices", l.TextIndices}} {
		want, _ := fx.I64(t, "out."+name+"."+idx.key)
		if fmt.Sprint(want) != fmt.Sprint(idx.got) {
			t.Fatalf("%s: %s %v, upstream %v", name, idx.key, idx.got, want)
		}
	}
}

// TestKeyframeConditionRowsFixture rebuilds the condition rows from the posterior moments and the
// injected noises: sampling (tolerance), float16 rounding of upstream's own sample (exact), then
// normalization, patchify and the 0.999 noise mix.
func TestKeyframeConditionRowsFixture(t *testing.T) {
	testutil.ForEachPendingFixture(t, "h3_fl2va", fl2vaGenerator, func(t *testing.T, fx *testutil.Fixture) {
		var c struct {
			C     int    `json:"latent_channels"`
			H     int    `json:"latent_height"`
			W     int    `json:"latent_width"`
			K     int    `json:"keyframes"`
			Patch [3]int `json:"patch_size"`
		}
		if err := fx.DecodeConfig(&c, "condition"); err != nil {
			t.Fatal(err)
		}
		vae := h3video.Config{LatentChannels: c.C}
		for _, name := range []string{"mean", "std"} {
			v, _ := fx.F32(t, "in.latents_"+name)
			for _, x := range v {
				if name == "mean" {
					vae.LatentsMean = append(vae.LatentsMean, float64(x))
				} else {
					vae.LatentsStd = append(vae.LatentsStd, float64(x))
				}
			}
		}
		var latents, noise [][]float32
		for k := 0; k < c.K; k++ {
			in := func(name string) []float32 { v, _ := fx.F32(t, fmt.Sprintf("in.kf%d.%s", k, name)); return v }
			out := func(name string) []float32 { v, _ := fx.F32(t, fmt.Sprintf("out.kf%d.%s", k, name)); return v }
			post := h3video.Posterior{Mean: in("mean"), LogVar: in("logvar")}
			sample, err := post.Sample(in("posterior_noise"))
			if err != nil {
				t.Fatal(err)
			}
			testutil.AssertClose(t, fmt.Sprintf("keyframe %d posterior sample", k), sample, out("sample"), nil, testutil.ParityTol(out("sample")))
			half := append([]float32(nil), out("sample")...)
			h3video.RoundTripF16(half)
			testutil.AssertBitExact(t, fmt.Sprintf("keyframe %d float16 round trip", k), half, out("sample_f16"))
			norm, err := vae.NormalizeLatents(out("sample_f16"), []int{1, c.C, 1, c.H, c.W})
			if err != nil {
				t.Fatal(err)
			}
			testutil.AssertClose(t, fmt.Sprintf("keyframe %d normalized", k), norm, out("normalized"), nil, testutil.ParityTol(out("normalized")))
			latents, noise = append(latents, out("normalized")), append(noise, in("condition_noise"))
		}
		rows, err := KeyframeConditionRows(latents, noise, c.C, c.H, c.W, c.Patch)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fx.F32(t, "out.condition_rows")
		testutil.AssertClose(t, "condition rows", rows, want, nil, testutil.ParityTol(want))
	})
}

func TestPlanKeyframeResize(t *testing.T) {
	for _, c := range []struct {
		sw, sh, w, h int
		stretch      bool
		want         KeyframeResize
	}{
		{96, 64, 96, 64, false, KeyframeResize{Identity: true, ResizeWidth: 96, ResizeHeight: 64}},
		{96, 64, 96, 64, true, KeyframeResize{Identity: true, ResizeWidth: 96, ResizeHeight: 64}},
		{300, 100, 96, 64, true, KeyframeResize{ResizeWidth: 96, ResizeHeight: 64}},
		// Cover: scale max(96/300, 64/100) = 0.64 -> 192x64, crop 48 from the left.
		{300, 100, 96, 64, false, KeyframeResize{ResizeWidth: 192, ResizeHeight: 64, CropLeft: 48}},
		// 80x120 -> scale 1.2 -> 96x144, crop 40 from the top.
		{80, 120, 96, 64, false, KeyframeResize{ResizeWidth: 96, ResizeHeight: 144, CropTop: 40}},
		// 97x61 -> scale 64/61 -> 101.77 rounds to 102; 2 columns over, crop 3 from the left.
		{97, 61, 96, 64, false, KeyframeResize{ResizeWidth: 102, ResizeHeight: 64, CropLeft: 3}},
	} {
		got, err := PlanKeyframeResize(c.sw, c.sh, c.w, c.h, c.stretch)
		if err != nil || got != c.want {
			t.Errorf("PlanKeyframeResize(%d, %d, %d, %d, %v) = %+v, %v; want %+v", c.sw, c.sh, c.w, c.h, c.stretch, got, err, c.want)
		}
	}
	if _, err := PlanKeyframeResize(0, 10, 96, 64, false); err == nil {
		t.Error("a 0-wide keyframe was accepted")
	}
}

// TestKeyframeLayoutProperties: keyframe rows sit between the text and the audio, one latent frame
// each, with the target rows' spatial grid at the first or last frame's time; the T2VA rows keep
// their order and positions, shifted by the condition rows.
func TestKeyframeLayoutProperties(t *testing.T) {
	base := Request{NumTextTokens: 5, LatentFrames: 12, LatentHeight: 4, LatentWidth: 6, AudioLatents: 40}
	t2va, err := Build(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, anchors := range [][]Anchor{KeyframeAnchors(true, false), KeyframeAnchors(false, true), KeyframeAnchors(true, true)} {
		req := base
		req.Keyframes = anchors
		l, err := Build(req)
		if err != nil {
			t.Fatal(err)
		}
		nc := len(anchors) * t2va.RowsPerFrame
		if l.NumConditionVideoRows != nc || l.SequenceLength != t2va.SequenceLength+nc {
			t.Fatalf("%v: %d condition rows of %d, want %d of %d", anchors, l.NumConditionVideoRows, l.SequenceLength, nc, t2va.SequenceLength+nc)
		}
		for i := 0; i < t2va.SequenceLength; i++ {
			j := i
			if i >= t2va.NumTextRows {
				j = i + nc
			}
			if l.PositionIDs[j] != t2va.PositionIDs[i] || l.TokenTags[j] != t2va.TokenTags[i] {
				t.Fatalf("%v: row %d moved to %d changed: %v/%d, T2VA %v/%d", anchors, i, j, l.PositionIDs[j], l.TokenTags[j], t2va.PositionIDs[i], t2va.TokenTags[i])
			}
		}
		lastFrame := t2va.VideoStart() + (t2va.LatentFrames-1)*t2va.RowsPerFrame
		for k, a := range anchors {
			for r := 0; r < l.RowsPerFrame; r++ {
				got := l.PositionIDs[l.ConditionStart()+k*l.RowsPerFrame+r]
				ref := t2va.PositionIDs[t2va.VideoStart()+r]
				if a == AnchorLast {
					ref = t2va.PositionIDs[lastFrame+r]
					// The last anchor is the pairwise span minus one frame; the grid's last time is
					// the latent frame's start, 4 frames before the end: check the spatial part and
					// that the time lies inside the last latent's span.
					if got[1] != ref[1] || got[2] != ref[2] || got[0] < ref[0] || got[0] > ref[0]+4*FrameRescale {
						t.Fatalf("last keyframe row %d at %v, last frame row %v", r, got, ref)
					}
					continue
				}
				if got != ref {
					t.Fatalf("first keyframe row %d at %v, first frame row at %v", r, got, ref)
				}
			}
		}
		uniq, idx := RowTimesteps(l, 0.5, 0.6, ConditionVideoTimestep(0.5), 1)
		for r := l.ConditionStart(); r < l.AudioStart(); r++ {
			if uniq[idx[r]] != ConditionVideoTimestep(0.5) {
				t.Fatalf("condition row %d has timestep %v, want %v", r, uniq[idx[r]], ConditionVideoTimestep(0.5))
			}
		}
	}
}

func TestKeyframeConditionRowsMixes(t *testing.T) {
	c, h, w := 2, 2, 4
	n := c * h * w
	clean, noise := make([]float32, n), make([]float32, n)
	for i := range clean {
		clean[i], noise[i] = float32(i), -1
	}
	rows, err := KeyframeConditionRows([][]float32{clean}, [][]float32{noise}, c, h, w, DefaultPatchSize)
	if err != nil {
		t.Fatal(err)
	}
	patched, _ := PatchifyVideo(clean, c, 1, h, w, DefaultPatchSize)
	for i, v := range rows {
		want := float32(0.999)*patched[i] + (1-float32(0.999))*(-1)
		if math.Abs(float64(v-want)) > 1e-6 {
			t.Fatalf("row value %d = %v, want %v", i, v, want)
		}
	}
	if _, err := KeyframeConditionRows([][]float32{clean}, nil, c, h, w, DefaultPatchSize); err == nil {
		t.Error("a keyframe without noise was accepted")
	}
}
