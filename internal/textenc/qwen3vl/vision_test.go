package qwen3vl

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"

	"fastvideo/internal/imageops"
	"fastvideo/internal/testutil"
	"fastvideo/internal/weights"
)

const visionGenerator = "internal/textenc/qwen3vl/testdata/gen_vision.py"

func tinyVisionConfig() VisionConfig {
	return VisionConfig{Depth: 2, HiddenSize: 16, HiddenAct: "gelu_pytorch_tanh", IntermediateSize: 32, NumHeads: 2,
		InChannels: 3, PatchSize: 4, SpatialMergeSize: 2, TemporalPatchSize: 2, OutHiddenSize: 24,
		NumPositionEmbeddings: 9, DeepstackVisualIndexes: []int{0}, ImageTokenID: 250, VisionStartTokenID: 248, VisionEndTokenID: 249}
}

// TestVisionFixture: the processor's layout and size rule, the tower's merged and DeepStack
// features, the M-RoPE positions and the text stack's hidden states with the images spliced in,
// all against transformers' Qwen3-VL.
func TestVisionFixture(t *testing.T) {
	testutil.ForEachPendingFixture(t, "qwen3vl_vision", visionGenerator, func(t *testing.T, fx *testutil.Fixture) {
		var rawCfg, rawProc json.RawMessage
		if err := fx.DecodeConfig(&rawCfg, "config"); err != nil {
			t.Fatal(err)
		}
		if err := fx.DecodeConfig(&rawProc, "processor"); err != nil {
			t.Fatal(err)
		}
		vc, err := ParseVisionConfig(rawCfg)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := ParseProcessorConfig(rawProc)
		if err != nil {
			t.Fatal(err)
		}
		t.Run("processor", func(t *testing.T) { checkProcessorCases(t, fx, pc) })
		feats := checkVisionTower(t, fx, vc)
		checkMultimodalText(t, fx, rawCfg, vc, feats)
	})
}

func checkProcessorCases(t *testing.T, fx *testutil.Fixture, pc ProcessorConfig) {
	var cases map[string]struct {
		W  int `json:"width"`
		H  int `json:"height"`
		RH int `json:"resized_height"`
		RW int `json:"resized_width"`
		// MaxDiff is how far transformers' resize strays from Pillow's BICUBIC.
		MaxDiff int `json:"max_abs_resized_minus_pil"`
	}
	if err := fx.DecodeConfig(&cases, "processor_cases"); err != nil {
		t.Fatal(err)
	}
	for name, c := range cases {
		h, w, err := pc.SmartResize(c.H, c.W)
		if err != nil || h != c.RH || w != c.RW {
			t.Errorf("%s: SmartResize(%d, %d) = %d, %d, %v; processor %d, %d", name, c.H, c.W, h, w, err, c.RH, c.RW)
			continue
		}
		rgb := fixtureRGB(t, fx, "out."+name+".resized")
		checkBicubic(t, fx, name, w, h, rgb, c.MaxDiff)
		pv, grid, err := pc.PixelValues(rgb, w, h)
		if err != nil {
			t.Fatal(err)
		}
		wantGrid, _ := fx.I64(t, "out."+name+".grid_thw")
		if fmt.Sprint(grid[:]) != fmt.Sprint(wantGrid) {
			t.Errorf("%s: grid_thw %v, processor %v", name, grid, wantGrid)
		}
		want, shape := fx.F32(t, "out."+name+".pixel_values")
		testutil.AssertClose(t, name+" pixel_values", pv, want, shape, testutil.ParityTol(want))
	}
}

func fixtureRGB(t *testing.T, fx *testutil.Fixture, name string) []uint8 {
	v, _ := fx.I64(t, name)
	rgb := make([]uint8, len(v))
	for i, x := range v {
		rgb[i] = uint8(x)
	}
	return rgb
}

// checkBicubic: ResizePILBicubic is Pillow's BICUBIC bit for bit, and Process's resize stays within
// the fixture's recorded distance (at most one level) of transformers' resize.
func checkBicubic(t *testing.T, fx *testutil.Fixture, name string, w, h int, resized []uint8, maxDiff int) {
	t.Helper()
	in := fixtureRGB(t, fx, "in."+name+".image")
	_, shape := fx.I64(t, "in."+name+".image")
	got, err := imageops.ResizePILBicubic(imageops.Image{Width: shape[1], Height: shape[0], Pix: in}, w, h)
	if err != nil {
		t.Fatal(err)
	}
	if want := fixtureRGB(t, fx, "out."+name+".pil_bicubic"); string(got.Pix) != string(want) {
		t.Errorf("%s: ResizePILBicubic differs from Pillow's BICUBIC", name)
	}
	if maxDiff > 1 {
		t.Fatalf("%s: the fixture records transformers' resize %d levels from Pillow's", name, maxDiff)
	}
	worst := 0
	for i := range resized {
		worst = max(worst, int(math.Abs(float64(got.Pix[i])-float64(resized[i]))))
	}
	if worst > maxDiff {
		t.Errorf("%s: the bicubic resize is %d levels from transformers', the fixture records %d", name, worst, maxDiff)
	}
}

func checkVisionTower(t *testing.T, fx *testutil.Fixture, vc VisionConfig) []VisionFeatures {
	v, err := NewVision(testutil.Backend(t), vc, fx.Weights())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	pixels, _ := fx.F32(t, "in.mm.pixel_values")
	grids := fixtureGrids(t, fx)
	var feats []VisionFeatures
	off := 0
	for k, g := range grids {
		n := g[0] * g[1] * g[2] * vc.PatchDim()
		f, err := v.Forward(context.Background(), pixels[off:off+n], g)
		if err != nil {
			t.Fatal(err)
		}
		off += n
		want, shape := fx.F32(t, fmt.Sprintf("out.mm.vision.%d.embeds", k))
		testutil.AssertClose(t, fmt.Sprintf("image %d embeds", k), f.Embeds, want, shape, testutil.ParityTol(want))
		for j, d := range f.Deepstack {
			want, shape := fx.F32(t, fmt.Sprintf("out.mm.vision.%d.deepstack.%d", k, j))
			testutil.AssertClose(t, fmt.Sprintf("image %d deepstack %d", k, j), d, want, shape, testutil.ParityTol(want))
		}
		feats = append(feats, f)
	}
	return feats
}

func fixtureGrids(t *testing.T, fx *testutil.Fixture) [][3]int {
	raw, _ := fx.I64(t, "in.mm.image_grid_thw")
	var grids [][3]int
	for i := 0; i+2 < len(raw); i += 3 {
		grids = append(grids, [3]int{int(raw[i]), int(raw[i+1]), int(raw[i+2])})
	}
	return grids
}

func checkMultimodalText(t *testing.T, fx *testutil.Fixture, rawCfg json.RawMessage, vc VisionConfig, feats []VisionFeatures) {
	cfg, err := ParseConfig(rawCfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := fx.TokenIDs(t, "in.mm.input_ids")
	pos, err := RopeIndex(vc, ids, fixtureGrids(t, fx))
	if err != nil {
		t.Fatal(err)
	}
	wantPos, _ := fx.I64(t, "out.mm.position_ids")
	for a := 0; a < 3; a++ {
		for i := range ids {
			if int64(pos[a][i]) != wantPos[a*len(ids)+i] {
				t.Fatalf("M-RoPE axis %d token %d = %d, transformers %d", a, i, pos[a][i], wantPos[a*len(ids)+i])
			}
		}
	}
	enc := openEncoder(t, cfg, fx.Weights(), Options{Resident: true, HiddenStateIndex: cfg.NumHiddenLayers, FinalNorm: true})
	states := map[int][]float32{}
	err = enc.WalkMultimodal(context.Background(), ids, vc.ImageTokenID, &Multimodal{Positions: pos, Images: feats},
		func(i int, h []float32) error { states[i] = h; return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Layer outputs after the last DeepStack injection match transformers' records everywhere.
	for k := len(vc.DeepstackVisualIndexes) + 1; k < cfg.NumHiddenLayers; k++ {
		want, shape := fx.F32(t, fmt.Sprintf("out.mm.hidden_states.%d", k))
		testutil.AssertClose(t, fmt.Sprintf("hidden state %d", k), states[k], want, shape, testutil.ParityTol(want))
	}
	want, shape := fx.F32(t, "out.mm.last_hidden_state")
	testutil.AssertClose(t, "last hidden state", states[cfg.NumHiddenLayers], want, shape, testutil.ParityTol(want))
}

func TestRopeIndexTextOnly(t *testing.T) {
	ids := []int{1, 2, 3, 4}
	pos, err := RopeIndex(tinyVisionConfig(), ids, nil)
	if err != nil || fmt.Sprint(pos) != fmt.Sprint(TextPositions(4)) {
		t.Fatalf("text-only positions %v, %v; want %v", pos, err, TextPositions(4))
	}
}

func TestImagePromptAndRopeIndex(t *testing.T) {
	c := tinyVisionConfig()
	// grid 1x4x6 patches -> 2x3 merged tokens = 6 placeholders.
	ids, vision, err := ImagePrompt(c, [][]int{{7, 8}}, []int{6}, []int{5, 6})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{7, 8, 248, 250, 250, 250, 250, 250, 250, 249, 5, 6}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if fmt.Sprint(vision) != fmt.Sprint([]bool{false, false, true, true, true, true, true, true, true, true, false, false}) {
		t.Fatalf("vision marks %v", vision)
	}
	pos, err := RopeIndex(c, ids, [][3]int{{1, 4, 6}})
	if err != nil {
		t.Fatal(err)
	}
	// Text 0..2 (labels and vision_start), the image at 3 + (0, row, col), then from 3+2+1 = 6.
	wantT := []int{0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8}
	wantH := []int{0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8}
	wantW := []int{0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8}
	if fmt.Sprint(pos) != fmt.Sprint([3][]int{wantT, wantH, wantW}) {
		t.Fatalf("positions %v", pos)
	}
	if _, err := RopeIndex(c, ids, nil); err == nil {
		t.Error("an image block without a grid was accepted")
	}
}

func TestSmartResize(t *testing.T) {
	pc := ProcessorConfig{PatchSize: 16, TemporalPatchSize: 2, MergeSize: 2, MinPixels: 64 * 64, MaxPixels: 32 * 32 * 12}
	for _, c := range []struct{ h, w, wh, ww int }{
		{64, 96, 64, 96},    // exact
		{120, 200, 64, 128}, // 128x192 > max: beta = sqrt(24000/12288), floor(2.68)=2, floor(4.47)=4
		{36, 40, 64, 96},    // 32x32 < min: beta = sqrt(4096/1440), ceil(1.90)=2, ceil(2.11)=3
		{50, 50, 64, 64},    // rounds to 64x64, inside the bounds
	} {
		h, w, err := pc.SmartResize(c.h, c.w)
		if err != nil || h != c.wh || w != c.ww {
			t.Errorf("SmartResize(%d, %d) = %d, %d, %v; want %d, %d", c.h, c.w, h, w, err, c.wh, c.ww)
		}
	}
	if _, _, err := pc.SmartResize(20, 100); err == nil {
		t.Error("an image below the factor was accepted")
	}
}

// TestPixelValuesLayout checks the patch order on an image whose every pixel value names its
// position: row r of the output is patch (block row, block col, row in block, col in block), and
// both temporal slots repeat the frame.
func TestPixelValuesLayout(t *testing.T) {
	pc := ProcessorConfig{PatchSize: 2, TemporalPatchSize: 2, MergeSize: 2, MinPixels: 1, MaxPixels: 1 << 20,
		ImageMean: [3]float64{0, 0, 0}, ImageStd: [3]float64{1, 1, 1}, RescaleFactor: 1}
	w, h := 8, 4
	rgb := make([]uint8, w*h*3)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			for c := 0; c < 3; c++ {
				rgb[(y*w+x)*3+c] = uint8(c*64 + y*w + x)
			}
		}
	}
	pv, grid, err := pc.PixelValues(rgb, w, h)
	if err != nil || grid != [3]int{1, 2, 4} {
		t.Fatalf("grid %v, %v", grid, err)
	}
	dim := 3 * 2 * 2 * 2
	// Row 5: block (0, 1), in-block (0, 1) -> patch row 0, patch column 3 -> pixels x 6..7, y 0..1.
	row := pv[5*dim:][:dim]
	for c := 0; c < 3; c++ {
		for tt := 0; tt < 2; tt++ {
			for y := 0; y < 2; y++ {
				for x := 0; x < 2; x++ {
					got := row[((c*2+tt)*2+y)*2+x]
					if want := float32(c*64 + y*w + 6 + x); got != want {
						t.Fatalf("row 5 feature (c%d t%d y%d x%d) = %v, want %v", c, tt, y, x, got, want)
					}
				}
			}
		}
	}
}

// TestVisionRandomWeights runs the tower on random weights: one token per 2x2 patches, every
// output finite, and one DeepStack feature per index.
func TestVisionRandomWeights(t *testing.T) {
	c := tinyVisionConfig()
	shapes, err := VisionParams(c)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVision(testutil.Backend(t), c, weights.NewSynthetic(1, shapes.Map(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	grid := [3]int{1, 4, 6}
	px := make([]float32, 24*c.PatchDim())
	for i := range px {
		px[i] = float32(i%7) / 7
	}
	f, err := v.Forward(context.Background(), px, grid)
	if err != nil {
		t.Fatal(err)
	}
	if f.Tokens != 6 || len(f.Embeds) != 6*c.OutHiddenSize || len(f.Deepstack) != 1 || testutil.MaxAbs(f.Embeds) == 0 {
		t.Fatalf("tokens %d, %d embeds, %d deepstack, max |embed| %v", f.Tokens, len(f.Embeds), len(f.Deepstack), testutil.MaxAbs(f.Embeds))
	}
	if _, err := v.Forward(context.Background(), px[:10], grid); err == nil {
		t.Error("a short pixel buffer was accepted")
	}
}

// releasedProcessorJSON is Qwen3-VL's released image preprocessor_config.json
// (huggingface.co/Qwen/Qwen3-VL-32B-Instruct/blob/main/preprocessor_config.json, the same in every
// Qwen3-VL size).
const releasedProcessorJSON = `{
  "size": {"longest_edge": 16777216, "shortest_edge": 65536},
  "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
  "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
  "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast"
}`

// TestQ32BProcessorIsReleased: the built-in processor is the released config, and its bounds act
// as they do there: H3's canvases keep their size, a small image grows to 65536 pixels, a huge one
// shrinks to 16777216.
func TestQ32BProcessorIsReleased(t *testing.T) {
	released, err := ParseProcessorConfig([]byte(releasedProcessorJSON))
	if err != nil {
		t.Fatal(err)
	}
	pc := Q32BProcessor()
	if !reflect.DeepEqual(pc, released) {
		t.Fatalf("Q32BProcessor %+v, released %+v", pc, released)
	}
	for _, c := range []struct{ h, w, wh, ww, tokens int }{
		{480, 832, 480, 832, 390},       // FastH3's canvas
		{768, 1344, 768, 1344, 1008},    // the released canvas
		{64, 96, 224, 320, 70},          // below shortest_edge: grown to at least 65536 pixels
		{8192, 4096, 5792, 2880, 16290}, // above longest_edge: shrunk under 16777216 pixels
	} {
		h, w, err := pc.SmartResize(c.h, c.w)
		if err != nil || h != c.wh || w != c.ww || pc.Tokens([3]int{1, h / 16, w / 16}) != c.tokens {
			t.Errorf("SmartResize(%d, %d) = %d, %d (%d tokens), %v; want %d, %d (%d)", c.h, c.w, h, w,
				pc.Tokens([3]int{1, h / 16, w / 16}), err, c.wh, c.ww, c.tokens)
		}
	}
}
