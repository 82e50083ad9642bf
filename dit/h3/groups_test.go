package h3

import (
	"cmp"
	"maps"
	"strings"
	"testing"

	"fastvideo/internal/testutil"

	"github.com/gomlx/gomlx/core/graph"
)

// Running the joint blocks several per program (Options.BlockGroup; 0 groups a dense forward) gives the
// numbers of one block per program, bit for bit on the CPU, and the fixture's outputs; a negative group
// is refused. TestVSAForwardParity does the same for VSA forwards.
func TestBlockGroups(t *testing.T) {
	testutil.ForEachFixture(t, "h3_dit", func(t *testing.T, fx *testutil.Fixture) {
		in := fixtureInputs(t, fx)
		var one ForwardOutputs
		for _, group := range []int{1, 2, 0} {
			m := fixtureModel(t, fx, Options{BlockGroup: group})
			out := mustForward(t, m, in)
			checkPrograms(t, m, cmp.Or(group, DefaultBlockGroup))
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

// groupedExecs are the joint-block programs a one-device model compiled so far.
func groupedExecs(t *testing.T, m *Model) map[groupKey]*graph.Exec {
	t.Helper()
	r, ok := m.blocks.(*groupedRunner)
	if !ok {
		t.Fatalf("the model runs its blocks with %T, want the one-device runner", m.blocks)
	}
	return r.execs
}

// checkPrograms fails unless m compiled exactly the joint-block programs its layers need with group
// blocks per program: full groups, and the shorter remainder.
func checkPrograms(t *testing.T, m *Model, group int) {
	t.Helper()
	layers := len(m.p.Blocks)
	want := map[int]bool{min(group, layers): true}
	if r := layers % group; layers > group && r != 0 {
		want[r] = true
	}
	got := map[int]bool{}
	for k := range groupedExecs(t, m) {
		got[k.blocks] = true
	}
	if !maps.Equal(got, want) {
		t.Errorf("%d layers, %d blocks per program: programs of %v blocks, want %v", layers, group, got, want)
	}
}
