package h3

import (
	"strings"
	"testing"

	"fastvideo/internal/safetensors"
	"fastvideo/internal/testutil"
)

// fixtureLadders are the timesteps the fixture's run visits: the video and audio ladders of its sigma
// grids and the condition-row timestep max(t_v, 0.999) of its FL2VA layout.
func fixtureLadders(t *testing.T, fx *testutil.Fixture) [][]float32 {
	t.Helper()
	var ladders [][]float32
	for _, name := range []string{"in.video_sigmas", "in.audio_sigmas"} {
		s, _ := fx.F32(t, name)
		l := make([]float32, len(s)-1)
		for i := range l {
			l[i] = 1 - s[i]
		}
		ladders = append(ladders, l)
	}
	ts, _ := fx.F32(t, "in.timestep")
	return append(ladders, ts) // includes the condition timestep
}

func TestAdaLNCacheEqualsUncached(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		in := fixtureInputs(t, fx)
		ref := mustForward(t, m, in)
		cache, err := m.PrepareAdaLN(fixtureLadders(t, fx)...)
		if err != nil {
			t.Fatal(err)
		}
		// The model owns the cache after KeepAdaLNCache below; Close is idempotent.
		defer cache.Close()
		if len(cache.Timesteps) <= len(in.Timesteps) {
			t.Fatalf("cache keys %v should extend the step's timesteps %v", cache.Timesteps, in.Timesteps)
		}
		in.AdaLN = cache
		text, err := m.PrepareText(in.Text)
		if err != nil {
			t.Fatal(err)
		}
		defer text.Close()
		in.TextState = text
		for step := 0; step < 2; step++ { // the same cache and text serve several forwards
			got := mustForward(t, m, in)
			testutil.AssertClose(t, "cached video", got.Video, ref.Video, []int{len(ref.Video)}, 1e-6*(testutil.MaxAbs(ref.Video)+1))
			testutil.AssertClose(t, "cached audio", got.Audio, ref.Audio, []int{len(ref.Audio)}, 1e-6*(testutil.MaxAbs(ref.Audio)+1))
		}

		// A timestep outside the cache is an error, not a silent wrong table.
		bad := in
		bad.Timesteps = append([]float32(nil), in.Timesteps...)
		bad.Timesteps[0] += 1e-3
		if _, err := m.Forward(bad); err == nil || !strings.Contains(err.Error(), "not in the AdaLN cache") {
			t.Errorf("forward with an uncached timestep: want an error, got %v", err)
		}

		// Export the cache as checkpoint tensors, load a checkpoint without the AdaLN projections, compare.
		tensors, man, err := m.ExportAdaLNCache(cache, 4)
		if err != nil {
			t.Fatal(err)
		}
		repl := map[string]safetensors.Info{}
		for _, ten := range tensors {
			repl[ten.Name] = safetensors.Info{Name: ten.Name, DType: ten.DType, Shape: ten.Shape, Data: ten.Data}
		}
		src := &testutil.EditSource{Base: fx.Weights(), Replace: repl, Hide: func(n string) bool {
			return strings.Contains(n, ".adaln_proj.") || strings.HasPrefix(n, "norm_out.linear.") || strings.HasPrefix(n, "adaln_basis.")
		}}
		cm, err := FromSource(testutil.Backend(t), fixtureConfig(t, fx), src, Options{AdaLNManifest: &man})
		if err != nil {
			t.Fatal(err)
		}
		defer cm.Close()
		in.AdaLN, in.TextState = nil, nil
		got := mustForward(t, cm, in)
		testutil.AssertClose(t, "checkpoint-cache video", got.Video, ref.Video, []int{len(ref.Video)}, 1e-6*(testutil.MaxAbs(ref.Video)+1))
		testutil.AssertClose(t, "checkpoint-cache audio", got.Audio, ref.Audio, []int{len(ref.Audio)}, 1e-6*(testutil.MaxAbs(ref.Audio)+1))
		if _, err := cm.PrepareAdaLN(in.Timesteps); err == nil {
			t.Errorf("PrepareAdaLN on a cache-only checkpoint must fail (no projections)")
		}

		// Keeping the prepared cache frees the projections; forwards then use it implicitly.
		if err := m.KeepAdaLNCache(cache); err != nil {
			t.Fatal(err)
		}
		if m.p.Blocks[0].AdaLN.W.T != nil || m.p.NormOut.W.T != nil {
			t.Errorf("KeepAdaLNCache left the AdaLN projection weights loaded")
		}
		got = mustForward(t, m, in)
		testutil.AssertClose(t, "kept-cache video", got.Video, ref.Video, []int{len(ref.Video)}, 1e-6*(testutil.MaxAbs(ref.Video)+1))
		if _, err := m.Forward(bad); err == nil {
			t.Errorf("after KeepAdaLNCache an uncached timestep must fail")
		}
	})
}

func TestCheckAdaLNLadder(t *testing.T) {
	// FastH3 4-step ladders (fastvideo/models/schedulers/scheduling_minimax_h3.py) and the MLX cache key set.
	video4 := []float32{0, 0.027027010917663574, 0.07692307233810425, 0.19999998807907104}
	audio4 := []float32{0, 0.10000002384185791, 0.25, 0.5}
	keys := CacheTimesteps(video4, audio4)
	want := []float32{0, 0.027027010917663574, 0.07692307233810425, 0.10000002384185791, 0.19999998807907104, 0.25, 0.5, 1}
	if len(keys) != len(want) {
		t.Fatalf("CacheTimesteps = %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("CacheTimesteps = %v, want %v", keys, want)
		}
	}
	man := &AdaLNManifest{Timesteps: keys, NumBlocks: 50, TablesPerBlock: 6, Steps: 4}
	if err := CheckAdaLNLadder(man, 4, video4, audio4); err != nil {
		t.Errorf("the exported ladder must pass: %v", err)
	}
	if err := CheckAdaLNLadder(nil, 6, []float32{0.3}); err != nil {
		t.Errorf("a full checkpoint accepts any ladder: %v", err)
	}
	// A 6-step run (P = 7) visits timesteps the 4-step cache lacks.
	video6 := []float32{0, 0.015, 0.04, 0.09, 0.17, 0.33}
	err := CheckAdaLNLadder(man, 6, video6, audio4)
	if err == nil {
		t.Fatal("a 6-step ladder against a 4-step cache must fail")
	}
	for _, s := range []string{"fixed 4-step AdaLN ladder", "use steps=4", "re-export", "6 steps"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	// Within tolerance is accepted (a float64-derived ladder rounded differently by one ulp).
	near := []float32{0.027027011}
	if err := CheckAdaLNLadder(man, 4, near); err != nil {
		t.Errorf("one-ulp timestep must match: %v", err)
	}
}

func TestReadAdaLNManifest(t *testing.T) {
	dir := t.TempDir()
	if m, err := ReadAdaLNManifest(dir); err != nil || m != nil {
		t.Fatalf("folder without a manifest: got %v, %v; want nil, nil", m, err)
	}
	doc := `{"format_version": 1, "adaln_cache": {"timesteps": [0, 0.5, 1], "num_blocks": 2, "tables_per_block": 6}}`
	if err := safetensors.WriteAtomic(dir+"/mlx_h3_dit.json", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	m, err := ReadAdaLNManifest(dir)
	if err != nil || m == nil || len(m.Timesteps) != 3 || m.NumBlocks != 2 {
		t.Fatalf("got %+v, %v", m, err)
	}
	cfg := ReleaseConfig()
	if err := m.validate(cfg); err == nil || !strings.Contains(err.Error(), "num_blocks = 2") {
		t.Errorf("a manifest for 2 blocks must not validate against 50 layers: %v", err)
	}
}
