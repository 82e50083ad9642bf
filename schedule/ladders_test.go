package schedule

import (
	"fmt"
	"math"
	"testing"

	"fastvideo/internal/testutil"
)

// Ladders computed from the reference schedulers: FastVideo
// fastvideo/models/schedulers/scheduling_minimax_h3.py, the MLX runtime's
// FastH3 contract and AdaLN cache (fastvideo/mlx_runtime/),
// scheduling_flow_unipc_multistep.py, scheduling_flow_match_euler_discrete.py
// and the DMD stage of fastvideo/pipelines/stages/denoising.py.

func TestH3FourStepLadder(t *testing.T) {
	s, err := NewH3Schedule(FastH3Steps)
	if err != nil {
		t.Fatal(err)
	}
	testutil.AssertBitExact(t, "video sigma", s.Video.Sigmas, []float32{1, 0.9729729890823364, 0.9230769276618958, 0.800000011920929, 0})
	testutil.AssertBitExact(t, "audio sigma", s.Audio.Sigmas, []float32{1, 0.8999999761581421, 0.75, 0.5, 0})
	testutil.AssertBitExact(t, "video t", s.Video.Timesteps, []float32{0, math.Float32frombits(0x3CDD67C0), math.Float32frombits(0x3D9D89D8), math.Float32frombits(0x3E4CCCCC)})
	testutil.AssertBitExact(t, "audio t", s.Audio.Timesteps, []float32{0, math.Float32frombits(0x3DCCCCD0), 0.25, 0.5})
	if s.Video.Sigmas[1] != float32(36.0/37) || s.Video.Sigmas[2] != float32(12.0/13) {
		t.Error("video sigmas 1, 2 must be f32(36/37), f32(12/13)")
	}
	if s.Video.Timesteps[1] != 1-float32(36.0/37) || s.Video.Timesteps[1] == float32(1.0/37) {
		t.Error("t1 must be 1 - f32(36/37), not f32(1/37)")
	}
	// Step 0 feeds t = 0 to both modalities (pure noise), one unique value.
	if u := s.StepTimesteps(0, Conditions{}); len(u) != 1 || u[0] != 0 {
		t.Errorf("step 0 unique timesteps %v, want [0]", u)
	}
}

func TestH3FortyNineStepLadder(t *testing.T) { // to 7 significant digits
	s, err := NewH3Schedule(H3BaseSteps)
	if err != nil {
		t.Fatal(err)
	}
	video := []float64{1, 0.9982669, 0.9964665, 0.9945946, 0.9926471, 0.9906191, 0.9885057, 0.9863014, 0.984,
		0.9815951, 0.9790795, 0.9764454, 0.9736842, 0.9707865, 0.9677419, 0.964539, 0.9611651, 0.957606,
		0.9538462, 0.9498681, 0.9456522, 0.9411765, 0.9364162, 0.9313433, 0.9259259, 0.9201278, 0.9139073,
		0.9072165, 0.9, 0.8921933, 0.8837209, 0.874494, 0.8644068, 0.8533334, 0.8411215, 0.8275862, 0.8125,
		0.7955801, 0.7764706, 0.754717, 0.7297297, 0.7007299, 0.6666667, 0.626087, 0.5769231, 0.516129,
		0.4390244, 0.3380282, 0.2, 0}
	audio := []float64{1, 0.9931034, 0.986014, 0.9787234, 0.971223, 0.9635037, 0.9555556, 0.9473684, 0.9389313,
		0.9302326, 0.9212598, 0.912, 0.902439, 0.892562, 0.8823529, 0.8717949, 0.8608696, 0.8495575, 0.8378378,
		0.8256881, 0.8130841, 0.8, 0.7864078, 0.7722772, 0.7575758, 0.742268, 0.7263158, 0.7096774, 0.6923077,
		0.6741573, 0.6551724, 0.6352941, 0.6144578, 0.5925926, 0.5696203, 0.5454546, 0.52, 0.4931507, 0.4647887,
		0.4347826, 0.4029851, 0.3692308, 0.3333333, 0.295082, 0.2542373, 0.2105263, 0.1636364, 0.1132075,
		0.05882353, 0}
	for name, c := range map[string]struct {
		got  []float32
		want []float64
	}{"video": {s.Video.Sigmas, video}, "audio": {s.Audio.Sigmas, audio}} {
		if len(c.got) != 50 {
			t.Fatalf("%s: %d sigmas, want 50", name, len(c.got))
		}
		// The doc's values come from an op-by-op float32 evaluation that
		// differs from torch's fused linspace by up to 1 ulp in places (its
		// "last-ulp caveat"); the fixture test pins the torch bits. Here:
		// within 2 ulp plus the 7-digit print rounding.
		for i, w := range c.want {
			ulp := float64(math.Nextafter32(c.got[i], 2) - c.got[i])
			half := 0.0 // half a unit in the 7th significant digit
			if w != 0 {
				half = 0.5 * math.Pow(10, math.Floor(math.Log10(math.Abs(w)))-6)
			}
			if math.Abs(float64(c.got[i])-w) > 2*ulp+half {
				t.Errorf("%s sigma[%d] = %.7g, want %.7g", name, i, c.got[i], w)
			}
		}
	}
	if s.Video.Timesteps[48] != 0.8 || math.Abs(float64(s.Audio.Timesteps[48])-0.9411765) > 1e-7 {
		t.Errorf("last t: video %v audio %v; want 0.8, 0.9411765", s.Video.Timesteps[48], s.Audio.Timesteps[48])
	}
}

func TestH3AdaLNCacheKeys(t *testing.T) {
	s, _ := NewH3Schedule(FastH3Steps)
	keys := s.AdaLNCacheTimesteps()
	testutil.AssertBitExact(t, "union", keys, []float32{0, 0.027027010917663574, 0.07692307233810425, 0.10000002384185791,
		0.19999998807907104, 0.25, 0.5, 1})
	for k, want := range [][]int{{0}, {1, 3}, {2, 5}, {4, 6}} {
		pos, err := CachePositions(keys, s.StepTimesteps(k, Conditions{}))
		if err != nil || fmt.Sprint(pos) != fmt.Sprint(want) {
			t.Errorf("step %d positions %v, %v; want %v", k, pos, err, want)
		}
	}
	if _, err := CachePositions(keys, []float32{0.3}); err == nil {
		t.Error("a timestep outside the cache must be rejected")
	}
	// T2VA visits 7 distinct times (the 1.0 key is for clean conditions);
	// FL2VA adds max(t_video, 0.999) for its keyframe rows.
	if v := s.VisitedTimesteps(Conditions{}); len(v) != 7 {
		t.Errorf("T2VA visits %v", v)
	}
	v := s.VisitedTimesteps(Conditions{Video: true})
	if len(v) != 8 || v[7] != float32(0.999) {
		t.Errorf("FL2VA visits %v", v)
	}
	// A shift-declaring contract (fastvideo_inference.json) with the 4-step rungs has the same
	// sigmas, but its timesteps subtract before rounding: t1 = f32(1 - 36/37)
	// = 0x3CDD67C9, not 1 - f32(36/37) = 0x3CDD67C0 — a different AdaLN key.
	for _, c := range []struct {
		shift float64
		lad   *H3Ladder
	}{{H3VideoShift, s.Video}, {H3AudioShift, s.Audio}} {
		d, err := NewH3LadderFromDMDSteps(c.shift, []int{1000, 750, 500, 250})
		if err != nil {
			t.Fatal(err)
		}
		testutil.AssertBitExact(t, "contract sigmas", d.Sigmas, c.lad.Sigmas)
		for i, r := range []float64{1, 0.75, 0.5, 0.25} {
			if want := float32(1 - FlowShift(c.shift, r)); d.Timesteps[i] != want {
				t.Errorf("contract t[%d] = %v, want %v", i, d.Timesteps[i], want)
			}
		}
	}
	if d, _ := NewH3LadderFromDMDSteps(H3VideoShift, []int{1000, 750, 500, 250}); math.Float32bits(d.Timesteps[1]) != 0x3CDD67C9 {
		t.Errorf("contract t1 = 0x%08x, want 0x3CDD67C9", math.Float32bits(d.Timesteps[1]))
	}
	for _, bad := range [][]int{{}, {1000, 1000}, {500, 750}, {1001}, {0}} {
		if _, err := NewH3LadderFromDMDSteps(12, bad); err == nil {
			t.Errorf("rungs %v must be rejected", bad)
		}
	}
	if _, err := NewH3Ladder(12, 0); err == nil {
		t.Error("0 steps must be rejected")
	}
	if _, err := NewH3LadderFromSigmas([]float64{1, 0.5, 0.6, 0}); err == nil {
		t.Error("non-decreasing sigmas must be rejected")
	}
}

func TestH3StepFinalIsX0(t *testing.T) {
	s, _ := NewH3Schedule(FastH3Steps)
	x := []float32{0.5, -1.25, 2}
	v := []float32{1, 0.5, -0.25}
	out := make([]float32, 3)
	if err := s.Video.Step(3, v, x, out); err != nil {
		t.Fatal(err)
	}
	sig := 1 - s.Video.Timesteps[3]
	for i := range x {
		if out[i] != x[i]+float32(sig*v[i]) {
			t.Errorf("final step must return x0: got %v", out)
		}
	}
	if err := s.Video.Step(4, v, x, out); err == nil {
		t.Error("step past the end must fail")
	}
}

func TestWanUniPCLadders(t *testing.T) {
	cases := []struct {
		shift float64
		n     int
		want  string
	}{
		{12, 40, "[999 997 995 993 990 988 985 982 979 976 972 969 965 961 957 952 947 941 936 929 923 915 907 898 888 878 865 852 837 819 799 776 749 717 679 631 571 493 387 235]"},
		{5, 40, "[999 994 989 984 978 972 965 959 952 945 937 929 921 912 902 892 882 871 859 846 833 818 803 786 769 749 729 706 681 654 624 592 555 514 468 416 357 288 208 113]"},
	}
	for _, c := range cases {
		u, err := NewUniPC(c.shift, c.n)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(u.Timesteps); got != c.want {
			t.Errorf("shift %g, %d steps:\n got %s\nwant %s", c.shift, c.n, got, c.want)
		}
		if u.Sigmas[c.n] != 0 {
			t.Error("final sigma must be 0")
		}
	}
	// The A14B expert switch falls between 878 and 865 (T2V) and between 902
	// and 892 (I2V): 26 and 15 high-noise steps.
	for _, c := range []struct {
		shift, boundary float64
		high            int
	}{{Wan22T2VA14BShift, Wan22T2VA14BBoundary, 26}, {Wan22I2VA14BShift, Wan22I2VA14BBoundary, 15}} {
		u, _ := NewUniPC(c.shift, 40)
		n := 0
		for _, ts := range u.Timesteps {
			if HighNoiseExpert(ts, c.boundary) {
				n++
			}
		}
		if n != c.high {
			t.Errorf("shift %g boundary %g: %d high-noise steps, want %d", c.shift, c.boundary, n, c.high)
		}
	}
	u, _ := NewUniPC(3, 50)
	if math.Abs(float64(u.Sigmas[0])-0.99989) > 5e-6 || math.Abs(float64(u.Sigmas[49])-0.05767) > 5e-6 {
		t.Errorf("shift 3 sigmas %v ... %v", u.Sigmas[0], u.Sigmas[49])
	}
	// sigma_max(train) = shift(0.999) = 0.99966639 for shift 3.
	if m := float64(shiftF32(3, float32(0.999))); math.Abs(m-0.99966639) > 1e-8 {
		t.Errorf("sigma_max %v", m)
	}
}

func TestFlowMatchEulerLadder(t *testing.T) {
	for _, c := range []struct {
		shift      float64
		n          int
		head, tail []float64
	}{
		{3, 50, []float64{1000, 993.124, 986.057}, []float64{66.900, 8.929}},
		{5, 50, []float64{1000, 995.872, 991.605}, []float64{114.819, 24.414}},
		{8, 3, []float64{1000, 890.449, 60.207}, nil},
	} {
		f, err := NewFlowMatchEuler(c.shift, c.n)
		if err != nil {
			t.Fatal(err)
		}
		got := append(f.Timesteps[:len(c.head):len(c.head)], f.Timesteps[len(f.Timesteps)-len(c.tail):]...)
		want := append(append([]float64(nil), c.head...), c.tail...)
		for i := range want {
			if math.Abs(float64(got[i])-want[i]) > 6e-4 {
				t.Errorf("shift %g n %d: timesteps %v, want %v", c.shift, c.n, got, want)
				break
			}
		}
		x, v, out := []float32{1, 2}, []float32{0.5, -1}, make([]float32, 2)
		if err := f.Step(0, v, x, out); err != nil {
			t.Fatal(err)
		}
		dt := f.Sigmas[1] - f.Sigmas[0]
		if out[0] != 1+float32(dt*0.5) {
			t.Errorf("Euler step %v", out)
		}
	}
}

func TestDMDLadders(t *testing.T) {
	d, err := NewDMDLadder(FastWanDMDSteps)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1, 0.75675672, 0.52173913} {
		if math.Abs(float64(d.Sigmas[i])-want) > 1e-7 {
			t.Errorf("sigma(%d) = %.8f, want %.8f", d.Timesteps[i], d.Sigmas[i], want)
		}
	}
	w, err := NewWarpedDMDLadder(FastWanDMDSteps, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1000, 939.6724, 845.2073} {
		if math.Abs(float64(w.WarpedTimesteps[i])-want) > 1e-4 {
			t.Errorf("warped t %v, want %v", w.WarpedTimesteps, want)
		}
		if math.Abs(float64(w.Sigmas[i])-want/1000) > 1e-6 {
			t.Errorf("warped sigma %v", w.Sigmas)
		}
	}
	x, v := []float32{1, -2}, []float32{0.25, 0.5}
	x0 := make([]float32, 2)
	if err := d.PredictX0(1, v, x, x0); err != nil {
		t.Fatal(err)
	}
	if want := float32(1 - 0.25*float64(d.Sigmas[1])); x0[0] != want {
		t.Errorf("x0 %v, want %v", x0[0], want)
	}
	next := make([]float32, 2)
	if err := d.Renoise(1, x0, []float32{0, 1}, next); err != nil {
		t.Fatal(err)
	}
	if next[1] != float32((1-d.Sigmas[2])*x0[1])+d.Sigmas[2] {
		t.Errorf("renoise %v", next)
	}
	if err := d.Renoise(2, x0, x0, next); err == nil {
		t.Error("no re-noise after the last step")
	}
	if _, err := NewDMDLadder([]int{757, 1000}); err == nil {
		t.Error("increasing DMD timesteps must be rejected")
	}
}
