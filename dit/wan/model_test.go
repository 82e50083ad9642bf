package wan

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"

	"fastvideo/internal/testutil"
)

// fixtureConfig decodes the tiny config a fixture was generated with; fixtureModel opens the model of
// a fixture on the test backend.
var fixtureConfig, fixtureModel = testutil.FixtureReaders(ParseConfig, FromSource, "arch_config")

// fixtureInputs reads in.hidden_states [1, C, T, H, W], in.encoder_hidden_states [1, S, text_dim] and
// in.timestep ([1] int64 or [1, L] float) as one sample.

// mustForward runs the model once; an error fails the test.
func mustForward(t testing.TB, m *Model, in ForwardInputs) []float32 {
	t.Helper()
	out, err := m.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fixtureInputs(t *testing.T, fx *testutil.Fixture) ForwardInputs {
	t.Helper()
	latent, sh := fx.F32(t, "in.hidden_states")
	text, _ := fx.F32(t, "in.encoder_hidden_states")
	var ts []float32
	if info := fx.Info(t, "in.timestep"); info.DType.IsFloat() {
		ts, _ = fx.F32(t, "in.timestep")
	} else {
		v, _ := fx.I64(t, "in.timestep")
		for _, x := range v {
			ts = append(ts, float32(x))
		}
	}
	if sh[0] != 1 {
		t.Fatalf("fixture batch %d: the model runs one sample per forward", sh[0])
	}
	return ForwardInputs{Latent: latent, Frames: sh[2], Height: sh[3], Width: sh[4], Timesteps: ts, Text: text}
}

// checkActs compares every act.* tensor of the fixture with the intermediate the forward traced under
// the same name (row-major values; the fixture's batch axis of 1 is implicit in ours).
func checkActs(t *testing.T, fx *testutil.Fixture, acts testutil.Trace) {
	t.Helper()
	acts.CheckActs(t, fx, func(key string, got testutil.Traced) []float32 {
		if key == "patch_embedding" { // fixture [1, D, T', H', W'] (the conv output); ours [L, D].
			return testutil.Transpose01(got.Values, got.Shape[0], got.Shape[1], 1)
		}
		return got.Values
	})
}

func TestForwardParity(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		out, acts := testutil.TracedForward(t, &m.trace, func() ([]float32, error) { return m.Forward(fixtureInputs(t, fx)) })
		want, sh := fx.F32(t, "out.sample")
		testutil.AssertClose(t, "out.sample", out, want, sh, testutil.ParityTol(want))
		checkActs(t, fx, acts)
	})
}

// TestForwardPlainMatchesTraced checks the production executables (no trace outputs) and a reused
// TextState against the fixture output, so the parity above is not a property of the traced graphs only.
func TestForwardPlainMatchesTraced(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		in := fixtureInputs(t, fx)
		text, err := m.PrepareText(in.Text)
		if err != nil {
			t.Fatal(err)
		}
		defer text.Close()
		in.Text, in.TextState = nil, text
		want, sh := fx.F32(t, "out.sample")
		for i := 0; i < 2; i++ { // the second call reuses the cached RoPE tables and executables
			out := mustForward(t, m, in)
			testutil.AssertClose(t, "out.sample", out, want, sh, testutil.ParityTol(want))
		}
	})
}

// TestPerTokenTimesteps checks that one timestep per token, all equal, gives exactly the per-sample
// output (they collapse to one embedded timestep), and that mixed per-token values run the gathered
// modulation path (whose values the TI2V fixture checks against the reference).
func TestPerTokenTimesteps(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		in := fixtureInputs(t, fx)
		nt, nh, nw, err := m.Config().Tokens(in.Frames, in.Height, in.Width)
		if err != nil {
			t.Fatal(err)
		}
		l := nt * nh * nw
		in.Timesteps = []float32{601}
		one := mustForward(t, m, in)
		in.Timesteps = make([]float32, l)
		for i := range in.Timesteps {
			in.Timesteps[i] = 601
		}
		same := mustForward(t, m, in)
		testutil.AssertClose(t, "per-token equal timesteps vs scalar", same, one, nil, 0)
		// Mixed: only the first frame's tokens at 0 (TI2V); tokens of later frames see a different
		// modulation, so the whole output changes, but the mixed path must stay finite.
		for i := 0; i < nh*nw; i++ {
			in.Timesteps[i] = 0
		}
		mixed := mustForward(t, m, in)
		if d := testutil.MaxAbsDiff(mixed, one); d == 0 || math.IsNaN(d) {
			t.Errorf("per-token timesteps [0…, 601…] vs 601: max diff %v, want a finite nonzero change", d)
		}
	})
}

func TestForwardInputErrors(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{})
		good := fixtureInputs(t, fx)
		for _, c := range []struct {
			name string
			edit func(*ForwardInputs)
			want string
		}{
			{"short latent", func(in *ForwardInputs) { in.Latent = in.Latent[1:] }, "ForwardInputs.Latent"},
			{"odd height", func(in *ForwardInputs) { in.Height = 3 }, "patch_size"},
			{"timesteps", func(in *ForwardInputs) { in.Timesteps = []float32{1, 2} }, "ForwardInputs.Timesteps has 2 values"},
			{"nan timestep", func(in *ForwardInputs) { in.Timesteps = []float32{float32(math.NaN())} }, "not finite"},
			{"text width", func(in *ForwardInputs) { in.Text = in.Text[1:] }, "text_dim"},
		} {
			in := good
			c.edit(&in)
			_, err := m.Forward(in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: want an error mentioning %q, got %v", c.name, c.want, err)
			}
		}
	})
}

// TestBFloat16Forward builds the bf16 executables (the GPU configuration, exact attention on this
// backend) and checks the output loosely against the f32 reference: it catches dtype mismatches in the
// graphs before a GPU run.
func TestBFloat16Forward(t *testing.T) {
	testutil.ForEachFixture(t, "wan_dit", func(t *testing.T, fx *testutil.Fixture) {
		m := fixtureModel(t, fx, Options{DType: dtypes.BFloat16})
		out := mustForward(t, m, fixtureInputs(t, fx))
		want, sh := fx.F32(t, "out.sample")
		testutil.AssertAtDType(t, "out.sample", dtypes.BFloat16, out, want, sh)
	})
}
