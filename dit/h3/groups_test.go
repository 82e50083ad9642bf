package h3

import (
	"strings"
	"testing"

	"fastvideo/internal/testutil"
)

// Running the joint blocks several per program (Options.BlockGroup) gives the numbers of one block per
// program, bit for bit on the CPU, and the fixture's outputs; a negative group is refused.
func TestBlockGroups(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		in := fixtureInputs(t, fx)
		var one ForwardOutputs
		for _, group := range []int{1, 2, 0} {
			m := fixtureModel(t, fx, Options{BlockGroup: group})
			out, err := m.Forward(in)
			if err != nil {
				t.Fatal(err)
			}
			if programs := len(m.groupExecs); programs != 1 {
				t.Errorf("group %d: %d joint-block programs compiled, want 1", group, programs)
			}
			want, sh := fx.F32(t, "out.video")
			testutil.AssertClose(t, "out.video", out.Video, want, sh, testutil.ParityTol(want))
			if group == 1 {
				one = out
				continue
			}
			if !testutil.SameBits(out.Video, one.Video) || !testutil.SameBits(out.Audio, one.Audio) {
				t.Errorf("group %d: outputs differ from one block per program", group)
			}
		}
		if _, err := FromSource(testutil.Backend(t), fixtureConfig(t, fx), fx.Weights(), Options{BlockGroup: -1}); err == nil || !strings.Contains(err.Error(), "BlockGroup -1") {
			t.Errorf("a negative BlockGroup: error %v, want one naming Options.BlockGroup", err)
		}
	})
}
