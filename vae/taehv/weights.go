package taehv

import (
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strconv"

	"fastvideo/internal/modelkit"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// tensorSpec is one decoder tensor of the checkpoint layout.
type tensorSpec struct {
	name  string
	shape []int
}

// decoderLayout lists every decoder tensor cfg needs, in layer order, with the shape the model
// takes (TGrow rows already at the model's stride).
func (c Config) decoderLayout() []tensorSpec {
	var out []tensorSpec
	add := func(name string, shape ...int) { out = append(out, tensorSpec{name, shape}) }
	add("decoder.1.weight", widths[0], c.LatentChannels, 3, 3)
	add("decoder.1.bias", widths[0])
	for i, mb := range memLayers {
		memBlockTensors(add, "decoder."+strconv.Itoa(mb.layer)+".conv.", mb.width)
		if i%3 == 2 { // after each stage's third MemBlock: its TGrow and the conv to the next width
			s := i / 3
			tg := tgrowLayers[s]
			add("decoder."+strconv.Itoa(tg.layer)+".conv.weight", tg.width*c.tgrowStride(s), tg.width, 1, 1)
			add("decoder."+strconv.Itoa(tg.layer+1)+".weight", widths[s+1], widths[s], 3, 3)
		}
	}
	add("decoder.22.weight", 3*c.PatchSize*c.PatchSize, widths[3], 3, 3)
	add("decoder.22.bias", 3*c.PatchSize*c.PatchSize)
	return out
}

// isTGrow reports whether name is a TGrow weight, and which (0, 1, 2).
func isTGrow(name string) (int, bool) {
	for i, tg := range tgrowLayers {
		if name == "decoder."+strconv.Itoa(tg.layer)+".conv.weight" {
			return i, true
		}
	}
	return 0, false
}

// DetectConfig reads a checkpoint's decoder layout: the latent channels from decoder.1.weight
// [256, C, 3, 3] and the patch size from the last conv's 3p² output channels (decoder.22.weight). H3
// trimming cannot be seen in the tensors (taeh3 is taew-shaped with C = 24): set Config.H3Trim for
// taeh3 files. The result is checked against the whole file (CheckSource).
func DetectConfig(src weights.Source) (Config, error) {
	first, ok := weights.HeaderOf(src, "decoder.1.weight")
	if !ok {
		return Config{}, fmt.Errorf("taehv: checkpoint has no decoder.1.weight (the first conv, [256, C, 3, 3]); is it a TAEHV base decoder? (the _super variants are not supported)")
	}
	if len(first.Shape) != 4 || first.Shape[0] != widths[0] {
		return Config{}, fmt.Errorf("taehv: decoder.1.weight has shape %v, want [256, C, 3, 3]", first.Shape)
	}
	last, ok := weights.HeaderOf(src, "decoder.22.weight")
	if !ok {
		return Config{}, fmt.Errorf("taehv: checkpoint has no decoder.22.weight (the last conv, [3p², 64, 3, 3])")
	}
	p := 0
	if len(last.Shape) == 4 {
		p = int(math.Round(math.Sqrt(float64(last.Shape[0]) / 3)))
	}
	if p < 1 || 3*p*p != last.Shape[0] {
		return Config{}, fmt.Errorf("taehv: decoder.22.weight has shape %v; its first dimension must be 3p² (3 or 12)", last.Shape)
	}
	cfg := Config{LatentChannels: first.Shape[1], PatchSize: p}
	return cfg, CheckSource(src, cfg)
}

// CheckSource validates every decoder tensor of src against cfg's layout before anything is built,
// naming the key, the shape found and the one wanted. A TGrow weight may have more rows than cfg
// needs (a checkpoint trained with time upscaling decoded with NoTimeUpscale): the model keeps the
// last ones, as upstream's patch_tgrow_layers does.
func CheckSource(src weights.Source, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("taehv: no weight source; open a checkpoint (safetensors.OpenCheckpoint)")
	}
	return checkLayout(src, cfg.decoderLayout(), cfg)
}

// checkLayout checks src's tensors against layout (TGrow weights may have more rows).
func checkLayout(src weights.Source, layout []tensorSpec, cfg Config) error {
	for _, spec := range layout {
		info, ok := weights.HeaderOf(src, spec.name)
		if !ok {
			return fmt.Errorf("taehv: checkpoint has no %s (want shape %v)", spec.name, spec.shape)
		}
		if slices.Equal(info.Shape, spec.shape) {
			continue
		}
		if _, tg := isTGrow(spec.name); tg && len(info.Shape) == 4 && info.Shape[0] > spec.shape[0] &&
			slices.Equal(info.Shape[1:], spec.shape[1:]) {
			continue
		}
		return fmt.Errorf("taehv: %s has shape %v, want %v%s", spec.name, info.Shape, spec.shape, shapeHint(spec.name, cfg))
	}
	return nil
}

// shapeHint names the config field a wrong shape most likely comes from.
func shapeHint(name string, cfg Config) string {
	switch name {
	case "decoder.1.weight", "encoder.17.weight", "encoder.17.bias":
		return fmt.Sprintf(" (latent channels %d: taew2_1 has 16, taew2_2 48, taeh3 24)", cfg.LatentChannels)
	case "decoder.22.weight", "decoder.22.bias", "encoder.0.weight":
		return fmt.Sprintf(" (patch size %d: 3p² output channels)", cfg.PatchSize)
	}
	return ""
}

// tgrowSource serves src with each TGrow weight cut to the model's rows, keeping the last ones
// (upstream's patch_tgrow_layers: "take the last-timestep output channels").
type tgrowSource struct {
	src weights.Source
	cfg Config
}

func (s tgrowSource) Names() []string { return s.src.Names() }

func (s tgrowSource) Tensor(name string) (safetensors.Info, bool) {
	info, ok := s.src.Tensor(name)
	i, tg := isTGrow(name)
	if !ok || !tg {
		return info, ok
	}
	rows := tgrowLayers[i].width * s.cfg.tgrowStride(i)
	if len(info.Shape) != 4 || info.Shape[0] <= rows {
		return info, ok
	}
	rowBytes := len(info.Data) / info.Shape[0]
	info.Data = info.Data[(info.Shape[0]-rows)*rowBytes:]
	info.Shape = append([]int{rows}, info.Shape[1:]...)
	return info, true
}

// FormulaSource is a deterministic stand-in checkpoint for cfg: every decoder and encoder tensor (TGrow weights
// with the rows of upstream's default time upscaling, as a released file has them) computed from its
// name and shape. It is the weight formula of testdata/gen_taehv.py, reproduced bit for bit, so the
// parity fixtures need not store ~9.8M weights; tiny test models can carry a TAEHV with it too.
//
//	u[k] = (k·2654435761 + crc32(name)) mod 2³², v = u/2³² − 0.5 (k: row-major flat index)
//	w[k] = float32(v·scale + offset), in float64
//	scale = 0.2 for a bias (offset 0.5 for decoder.22.bias, else 0), 2·√(3/fan_in) for a weight
func FormulaSource(cfg Config) weights.MapSource {
	full := cfg
	full.NoTimeUpscale = false
	src := weights.MapSource{}
	for _, spec := range append(full.decoderLayout(), full.encoderLayout()...) {
		vals := formulaValues(spec.name, spec.shape)
		src[spec.name] = safetensors.Info{Name: spec.name, DType: safetensors.F32, Shape: spec.shape, Data: safetensors.F32Bytes(vals)}
	}
	return src
}

// formulaValues is gen_taehv.py's formula_weight.
func formulaValues(name string, shape []int) []float32 {
	n := modelkit.Elements(shape)
	salt := uint64(crc32.ChecksumIEEE([]byte(name)))
	var scale, offset float64
	if len(shape) == 1 {
		scale = 0.2
		if name == "decoder.22.bias" {
			offset = 0.5
		}
	} else {
		fan := n / shape[0]
		scale = 2 * math.Sqrt(3.0/float64(fan))
	}
	out := make([]float32, n)
	for k := range out {
		u := (uint64(k)*2654435761 + salt) % (1 << 32)
		v := float64(u)/float64(1<<32) - 0.5
		out[k] = float32(float64(v*scale) + offset) // the conversion keeps v·scale rounded: no FMA
	}
	return out
}

// memBlockTensors adds the tensors of MemBlock(n) under prefix ("….conv."): conv.0 [n, 2n, 3, 3] over
// [x, past], conv.2 and conv.4 [n, n, 3, 3], each with its bias.
func memBlockTensors(add func(name string, shape ...int), prefix string, n int) {
	add(prefix+"0.weight", n, 2*n, 3, 3)
	add(prefix+"0.bias", n)
	add(prefix+"2.weight", n, n, 3, 3)
	add(prefix+"2.bias", n)
	add(prefix+"4.weight", n, n, 3, 3)
	add(prefix+"4.bias", n)
}
