package packing

import (
	"math"
	"testing"
)

// Worked examples and weight-free vectors computed from the reference formulas
// (FastVideo fastvideo/pipelines/basic/minimax_h3/packing.py and the MLX
// runtime's plan_fast_temporal / plan_fast_spatial in fastvideo/mlx_runtime/).

func TestWorkedExample832x480x124(t *testing.T) {
	g, err := NewGeometry(480, 832, 124)
	if err != nil {
		t.Fatal(err)
	}
	if g.LatentHeight != 30 || g.LatentWidth != 52 || g.RowsPerFrame() != 390 {
		t.Fatalf("latent %dx%d, %d rows/frame; want 30x52, 390", g.LatentHeight, g.LatentWidth, g.RowsPerFrame())
	}
	if g.LatentFrames != 37 || g.AudioLatents != 207 || g.AudioRows() != 414 || g.VideoRows() != 14430 || g.NonTextRows() != 14844 {
		t.Fatalf("latents %d, audio %d (%d rows), video rows %d, non-text %d; want 37, 207 (414), 14430, 14844",
			g.LatentFrames, g.AudioLatents, g.AudioRows(), g.VideoRows(), g.NonTextRows())
	}
	if got := AudioSamples(g.AudioLatents); got != 165600 {
		t.Errorf("audio samples %d, want 165600", got)
	}
	l, err := Build(g.Request(nil, 93))
	if err != nil {
		t.Fatal(err)
	}
	if l.SequenceLength != 14937 {
		t.Fatalf("L = %d, want 14937", l.SequenceLength)
	}
	// Tags: rows 0-92 text, 93-506 audio, 507-14936 video; the ranges of the reference's build_packed_sequence.
	for i, tag := range l.TokenTags {
		want := TagVideo
		switch {
		case i <= 92:
			want = TagText
		case i <= 506:
			want = TagAudio
		}
		if tag != want {
			t.Fatalf("tag[%d] = %d, want %d", i, tag, want)
		}
	}
	if l.AudioIndices[0] != 93 || l.AudioIndices[206] != 299 || l.AudioIndices[207] != 300 || l.AudioIndices[413] != 506 ||
		l.VideoIndices[0] != 507 || l.VideoIndices[len(l.VideoIndices)-1] != 14936 || l.TextIndices[92] != 92 {
		t.Fatalf("index ranges differ from the worked example")
	}
	if a := SqrtArea(30, 52); a != 39.496835316262995 {
		t.Errorf("A = %v, want 39.496835316262995", a)
	}
	hg, wg := SpatialGrid(30, 2, SqrtArea(30, 52)), SpatialGrid(52, 2, SqrtArea(30, 52))
	exact(t, "hgrid[0]", hg[0], 3.8471275949959995)
	exact(t, "hgrid[1]", hg[1], 5.467510582329866)
	exact(t, "hgrid[2]", hg[2], 7.087893569663732)
	exact(t, "hgrid[14]", hg[14], 26.53248941767013)
	exact(t, "wgrid[0]", wg[0], -5.064978835340266)
	exact(t, "wgrid[1]", wg[1], -3.4445958480063994)
	exact(t, "wgrid[25]", wg[25], 35.4445958480064)
	tg := TemporalGrid(37, 0, 1)
	exact(t, "tgrid[0]", tg[0], 0)
	exact(t, "tgrid[36]", tg[36], 199.99999999999991)
	// Rounded, these are: 1.6667, 8.3333, 15, 21.6667, 28.3333, 30, 36.6667.
	for j, want := range map[int]float64{1: 5.0 / 3, 2: 25.0 / 3, 3: 15, 4: 65.0 / 3, 5: 85.0 / 3, 6: 30, 7: 110.0 / 3} {
		if math.Abs(tg[j]-want) > 1e-12 {
			t.Errorf("tgrid[%d] = %v, want %v", j, tg[j], want)
		}
	}
	pos := map[int][3]float64{
		93:    {93, 0, -5.064978835340266},
		300:   {93, 0, 35.4445958480064},
		507:   {93, 3.8471275949959995, -5.064978835340266},
		533:   {93, 5.467510582329866, -5.064978835340266},
		897:   {94.66666666666667, 3.8471275949959995, -5.064978835340266},
		14936: {292.9999999999999, 26.53248941767013, 35.4445958480064},
	}
	for row, want := range pos {
		for a := 0; a < 3; a++ {
			exact(t, "position", l.PositionIDs[row][a], want[a])
		}
	}
	if float32(l.PositionIDs[14936][0]) != 293 {
		t.Errorf("float32 time of the last row = %v, want 293", float32(l.PositionIDs[14936][0]))
	}
	// 768x1344 (default preset): 1008 tokens/frame, 37,296 video rows, L = S + 37,710.
	g2, _ := NewGeometry(768, 1344, 124)
	if g2.RowsPerFrame() != 1008 || g2.VideoRows() != 37296 || g2.NonTextRows() != 37710 {
		t.Errorf("768x1344: %d rows/frame, %d video rows, %d non-text rows", g2.RowsPerFrame(), g2.VideoRows(), g2.NonTextRows())
	}
}

func TestTemporalFastPlan(t *testing.T) { // MLX plan_fast_temporal
	p, err := PlanFastTemporal(124, 2)
	if err != nil {
		t.Fatal(err)
	}
	if p.SourceFrames != 73 || p.SourceLatentFrames != 22 || p.TargetLatentFrames != 37 {
		t.Fatalf("plan %+v; want 73 source frames, 22/37 latents", p)
	}
	exact(t, "scale", p.VideoTemporalScale, 1.7391304347826073)
	exact(t, "tgrid(22)[-1]", TemporalGrid(22, 0, 1)[21], 115.00000000000004)
	exact(t, "tgrid(37)[-1]", TemporalGrid(37, 0, 1)[36], 199.99999999999991)
	exact(t, "pairwise span(37)", TemporalSpan(37), 206.66666666666663)
	seq := 0.0
	for j := 0; j < 37; j++ {
		seq += latentSpan(j)
	}
	exact(t, "sequential span(37)", seq, 206.66666666666657)
	for target, source := range map[int]int{124: 73, 141: 73, 243: 124, 345: 175, 362: 192} {
		p, err := PlanFastTemporal(target, 2)
		if err != nil || p.SourceFrames != source {
			t.Errorf("PlanFastTemporal(%d) source = %d, %v; want %d", target, p.SourceFrames, err, source)
		}
	}
	if AudioLatentFrames(p.TargetFrames) != 207 {
		t.Errorf("audio keeps %d latents, want 207", AudioLatentFrames(p.TargetFrames))
	}
	// The stretched layout: 22 latents whose last time is S + 199.999...,
	// audio positions unchanged.
	g, _ := NewGeometry(480, 832, 124)
	req := g.Request(nil, 93)
	req.LatentFrames = p.SourceLatentFrames
	req.VideoTemporalScale = p.VideoTemporalScale
	l, err := Build(req)
	if err != nil {
		t.Fatal(err)
	}
	if l.NumVideoRows != 22*390 || l.NumAudioRows != 414 {
		t.Fatalf("fast layout: %d video rows, %d audio rows", l.NumVideoRows, l.NumAudioRows)
	}
	last := l.PositionIDs[l.SequenceLength-1][0]
	if math.Abs(last-(93+199.99999999999991)) > 1e-9 {
		t.Errorf("last stretched video time %v, want ~%v", last, 93+199.99999999999991)
	}
	full, _ := Build(g.Request(nil, 93))
	for i := 93; i < 507; i++ {
		if l.PositionIDs[i] != full.PositionIDs[i] {
			t.Fatalf("audio position %d changed by the temporal scale", i)
		}
	}
	if _, err := Build(Request{NumTextTokens: 2, LatentFrames: 2, LatentHeight: 2, LatentWidth: 2, AudioLatents: 1,
		Keyframes: []Anchor{AnchorFirst}, VideoTemporalScale: 2}); err == nil {
		t.Error("a temporal scale with keyframes must be rejected")
	}
}

func TestSpatialFastPlan(t *testing.T) { // MLX plan_fast_spatial
	for _, c := range []struct{ h, w, s1h, s1w, ch, cw int }{
		{480, 832, 240, 416, 256, 416},
		{720, 1280, 360, 640, 384, 640},
		{768, 1344, 384, 672, 384, 672},
		{1080, 1920, 540, 960, 544, 960},
	} {
		p, err := PlanFastSpatial(c.h, c.w, 2)
		if err != nil || p.Stage1Height != c.s1h || p.Stage1Width != c.s1w || p.CanvasHeight != c.ch || p.CanvasWidth != c.cw {
			t.Errorf("PlanFastSpatial(%d,%d) = %+v, %v", c.h, c.w, p, err)
		}
	}
	if _, err := PlanFastSpatial(32, 32, 2); err == nil {
		t.Error("32x32 at scale 2 must be rejected")
	}
	if _, err := PlanFastSpatial(480, 832, 1); err == nil {
		t.Error("scale 1 must be rejected")
	}
	g, _ := NewGeometry(256, 416, 124)
	if g.LatentHeight != 16 || g.LatentWidth != 26 || g.RowsPerFrame() != 104 || g.VideoRows() != 3848 {
		t.Errorf("256x416 canvas: %+v, %d rows/frame, %d video rows", g, g.RowsPerFrame(), g.VideoRows())
	}
	// MLX round-up canvas and crop: 720x1280 -> 736x1280, rows 8..727.
	h, w, _ := CeilCanvas(720, 1280)
	top, left := CropOffsets(h, w, 720, 1280)
	if h != 736 || w != 1280 || top != 8 || left != 0 {
		t.Errorf("CeilCanvas(720,1280) = %dx%d crop (%d,%d)", h, w, top, left)
	}
}

func TestUnitVectors(t *testing.T) {
	for in, want := range map[int]int{1: 5, 5: 5, 6: 22, 22: 22, 120: 124, 121: 124, 124: 124, 125: 141, 360: 362, 363: 379} {
		if got, err := AlignNumFrames(in); err != nil || got != want {
			t.Errorf("align(%d) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := AlignNumFrames(0); err == nil {
		t.Error("align(0) must fail")
	}
	for in, want := range map[int]int{5: 2, 22: 7, 73: 22, 124: 37, 141: 42, 243: 72, 345: 102, 362: 107} {
		if got, err := VideoLatentFrames(in); err != nil || got != want {
			t.Errorf("video_latents(%d) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := VideoLatentFrames(123); err == nil {
		t.Error("video_latents(123) must fail")
	}
	for in, want := range map[int]int{5: 8, 22: 37, 73: 122, 124: 207, 141: 235, 243: 405, 345: 575, 362: 603} {
		if got := AudioLatentFrames(in); got != want {
			t.Errorf("audio_latents(%d) = %d, want %d", in, got, want)
		}
	}
	var accepted []int
	for n := 1; n <= 400; n++ {
		if a, err := ResolveTargetNumFrames(n); err == nil && a == n {
			accepted = append(accepted, n)
		}
	}
	if len(accepted) != 14 || accepted[0] != 124 || accepted[13] != 345 {
		t.Errorf("accepted aligned counts %v, want 124..345 step 17", accepted)
	}
	if _, err := ResolveTargetNumFrames(362); err == nil {
		t.Error("362 frames (15.08 s) must be rejected")
	}
	for ratio, want := range map[[2]float64][2]int{
		{16, 9}: {768, 1344}, {9, 16}: {1344, 768}, {1, 1}: {768, 768}, {4, 1}: {512, 2016},
		{1, 4}: {2016, 512}, {4, 3}: {768, 1024}, {3, 4}: {1024, 768}, {21, 9}: {672, 1536},
	} {
		h, w, err := ResolveCanvasSize(ratio[0], ratio[1])
		if err != nil || h != want[0] || w != want[1] {
			t.Errorf("canvas %v = %d,%d,%v want %v", ratio, h, w, err, want)
		}
	}
	if _, _, err := ResolveCanvasSize(5, 1); err == nil {
		t.Error("5:1 must be rejected")
	}
	if _, _, err := ResolveTargetCanvas(480, 0, [2]float64{16, 9}, 16); err == nil {
		t.Error("height without width must be rejected")
	}
	if h, w, err := ResolveTargetCanvas(0, 0, [2]float64{16, 9}, 16); err != nil || h != 768 || w != 1344 {
		t.Errorf("default canvas %dx%d %v", h, w, err)
	}
	if _, _, err := ResolveTargetCanvas(481, 832, [2]float64{16, 9}, 16); err == nil {
		t.Error("481 must be rejected")
	}

	// adaln_index for the 4-step T2VA ladder.
	g, _ := NewGeometry(256, 448, 124)
	l, _ := Build(g.Request(nil, 5))
	check := func(uniq []float32, idx []uint8, text, video, audio int32) {
		t.Helper()
		ai := AdaLNIndices(idx, l.TokenTags)
		if ai[0] != text || ai[l.VideoStart()] != video || ai[l.AudioStart()] != audio {
			t.Errorf("adaln_index text %d video %d audio %d (unique %v); want %d %d %d",
				ai[0], ai[l.VideoStart()], ai[l.AudioStart()], uniq, text, video, audio)
		}
	}
	u, idx := RowTimesteps(l, 0, 0, ConditionVideoTimestep(0), 1)
	check(u, idx, 1, 0, 2)
	u, idx = RowTimesteps(l, 0.027027010917663574, 0.10000002384185791, ConditionVideoTimestep(0.027027010917663574), 1)
	check(u, idx, 1, 0, 5)
	if ConditionVideoTimestep(0.5) != float32(0.999) {
		t.Errorf("condition time %v", ConditionVideoTimestep(0.5))
	}
}

func TestPatchifyChannelMajor(t *testing.T) { // the checkpoint's channel-major patch features
	c, tt, h, w := 3, 2, 4, 6
	lat := make([]float32, c*tt*h*w)
	for i := range lat {
		lat[i] = float32(i)
	}
	rows, err := PatchifyVideo(lat, c, tt, h, w, [3]int{})
	if err != nil {
		t.Fatal(err)
	}
	// Row (t=1, hp=1, wp=2), feature c*4 + ph*2 + pw = latent[c, 1, 2+ph, 4+pw].
	row := (1*2+1)*3 + 2
	for ci := 0; ci < c; ci++ {
		for ph := 0; ph < 2; ph++ {
			for pw := 0; pw < 2; pw++ {
				got := rows[row*12+ci*4+ph*2+pw]
				want := lat[((ci*tt+1)*h+2+ph)*w+4+pw]
				if got != want {
					t.Fatalf("feature (%d,%d,%d) = %v, want %v", ci, ph, pw, got, want)
				}
			}
		}
	}
	back, _ := UnpatchifyVideo(rows, c, tt, h, w, [3]int{})
	for i := range lat {
		if back[i] != lat[i] {
			t.Fatalf("round trip differs at %d", i)
		}
	}
	aud := make([]float32, 2*4*5)
	for i := range aud {
		aud[i] = float32(i)
	}
	ar, _ := PackAudio(aud, 4, 5)
	if ar[(1*5+3)*4+2] != aud[(1*4+2)*5+3] {
		t.Fatal("audio row ch*N+n, feature = channel")
	}
	ab, _ := UnpackAudio(ar, 4, 5)
	for i := range aud {
		if ab[i] != aud[i] {
			t.Fatalf("audio round trip differs at %d", i)
		}
	}
}

func exact(t *testing.T, label string, got, want float64) {
	t.Helper()
	if math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("%s = %v, want %v (bit-exact)", label, got, want)
	}
}
