package testutil

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestForEachFixtureFindsLocalAndExtra(t *testing.T) {
	extra := t.TempDir()
	data, err := os.ReadFile(filepath.Join("testdata", "h3_schedule.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(extra, "renamed_case.safetensors"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ExtraFixturesEnv, extra)
	var names []string
	ForEachFixture(t, "h3_schedule", func(t *testing.T, fx *Fixture) {
		names = append(names, fx.Name)
		if fx.Kind != "h3_schedule" || !fx.Has("out.video_grid5.sigmas") {
			t.Errorf("%s: kind %q or tensors wrong", fx.Name, fx.Kind)
		}
		v, shape := fx.F32(t, "out.video_grid5.sigmas")
		if len(shape) != 1 || shape[0] != 5 || v[0] != 1 {
			t.Errorf("sigmas %v %v", v, shape)
		}
	})
	if len(names) != 2 || names[0] != "h3_schedule" || names[1] != "renamed_case" {
		t.Fatalf("ran %v", names)
	}
}

func TestCompareNeverHidesNaN(t *testing.T) {
	d := Compare([]float32{1, float32(math.NaN())}, []float32{1, 2})
	if !math.IsInf(d.MaxAbs, 1) || d.Index != 1 || !d.NaNFound {
		t.Fatalf("NaN not reported: %+v", d)
	}
	if got := Unravel(5, []int{2, 3}); got[0] != 1 || got[1] != 2 {
		t.Fatalf("unravel %v", got)
	}
	if ParityTol([]float32{-50, 2}) != 5e-3 || ParityTol([]float32{0.5}) != 1e-4 {
		t.Fatal("tolerance formula")
	}
}
