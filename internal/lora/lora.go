// Package lora reads LoRA adapter files in the layouts published for video DiTs and merges them into
// host float32 weights. It knows no model: a model's package maps the normalized module names onto its
// checkpoint (a NameMap; dit/wan has Wan's).
//
// Layouts (diffusers loaders/lora_conversion_utils.py and lora_pipeline.py WanLoraLoaderMixin, ComfyUI
// comfy/lora.py, FastVideo scripts/lora_extraction/extract_lora.py):
//   - PEFT/diffusers: m.lora_A.weight [r,in], m.lora_B.weight [out,r], optional m.lora_B.bias, also
//     m.lora_A.<adapter>.weight; alpha from the header's lora_adapter_metadata JSON, else alpha = r.
//   - native Wan / ComfyUI / kohya / diffusion-pipe: m.lora_down.weight, m.lora_up.weight (or lora_A/lora_B
//     under native names), scalar m.alpha.
//   - musubi-tuner: lora_unet_<m with '_' for '.'>.lora_down.weight, .lora_up.weight, .alpha. The module
//     keeps its underscores here (turning them back into dots needs the model's vocabulary); the model's
//     NameMap resolves them.
//   - FastVideo's extractor: m.lora_A.weight, m.lora_B.weight, m.lora_rank int32[1], m.lora_alpha f32[1].
//   - dense payloads: m.diff (weight delta), m.diff_b (bias delta), <block>.diff_m (the block's modulation
//     table delta, target <block>.modulation), m.set_weight (replacement).
//
// A model whose adapters name fused projections its checkpoint keeps apart (H3's native attn.qkv_proj
// against to_q/to_k/to_v) maps them with Target.Rows: B·A's rows are added block by block.
//
// Prefixes base_model.model., diffusion_model., transformer. are cut. The low-rank scale is
// strength·alpha/r with alpha kept exactly as stored (upstream loaders that int() it turn 0.5 into 0);
// dense payloads are scaled by strength only.
//
// Open validates everything it can before any arithmetic: key names, pairs, ranks, shapes, dtypes,
// alphas, and a scan of every value for NaN/Inf. The factors stay in the file mapping until a merge
// decodes them one module at a time, so a gigabyte adapter costs no heap until it is used.
package lora

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"fastvideo/internal/safetensors"
)

// MaxRank bounds a low-rank factor's rank: published video LoRAs use 4 to 256; a larger rank is a
// corrupt or mislabeled file (a dense matrix under a lora_ name).
const MaxRank = 1024

// Update is one module's normalized change. A module may combine a low-rank pair with a bias delta and
// a dense delta; Set excludes the others.
type Update struct {
	// Module is the normalized module name (prefixes cut), e.g. "blocks.0.self_attn.q" (native),
	// "blocks.0.attn1.to_q" (diffusers) or "blocks_0_self_attn_q" (musubi, see Musubi).
	Module string
	// Musubi reports a musubi/kohya module name, written with '_' for '.'.
	Musubi bool
	// PEFTAdapter is the PEFT adapter name its keys carry (m.lora_A.<name>.weight), "" when none.
	PEFTAdapter string
	// Keys are the file keys that make this update, sorted.
	Keys []string

	// Rank > 0 when the update has a low-rank pair: A [Rank, In], B [Out, Rank].
	Rank, In, Out int
	// Alpha is the low-rank pair's alpha (Scale = Alpha/Rank), and AlphaFrom where it came from:
	// the key holding it, "lora_adapter_metadata" or "default (alpha = rank)".
	Alpha     float64
	AlphaFrom string

	a, b       *safetensors.Info
	loraBias   *safetensors.Info // lora_B.bias: scaled by strength·alpha/r
	diff       *safetensors.Info // .diff/.diff_m: scaled by strength
	diffBias   *safetensors.Info // .diff_b: scaled by strength
	set        *safetensors.Info // .set_weight: replaces the weight
	alphaKey   *safetensors.Info
	rankKey    *safetensors.Info
	loraAlphaK *safetensors.Info
}

// Scale is Alpha/Rank, the factor of B·A before the strength (0 without a low-rank pair).
func (u *Update) Scale() float64 {
	if u.Rank == 0 {
		return 0
	}
	return u.Alpha / float64(u.Rank)
}

// HasLowRank reports a low-rank pair (A, B).
func (u *Update) HasLowRank() bool { return u.a != nil }

// HasDiff reports a dense weight delta (.diff or .diff_m).
func (u *Update) HasDiff() bool { return u.diff != nil }

// HasBiasDelta reports a bias delta (.diff_b, or lora_B.bias of a low-rank pair).
func (u *Update) HasBiasDelta() bool { return u.diffBias != nil || u.loraBias != nil }

// HasSet reports a replacement weight (.set_weight).
func (u *Update) HasSet() bool { return u.set != nil }

// DenseShape is the shape of the dense delta or replacement (nil when there is none).
func (u *Update) DenseShape() []int {
	switch {
	case u.diff != nil:
		return slices.Clone(u.diff.Shape)
	case u.set != nil:
		return slices.Clone(u.set.Shape)
	}
	return nil
}

// Adapter is one opened adapter file. It holds the file mapping until Close.
type Adapter struct {
	// Name identifies the adapter in messages (the file path for Open).
	Name string
	// Updates are sorted by module.
	Updates []*Update
	file    *safetensors.File
}

// Close releases the file mapping; the adapter cannot be merged afterwards.
func (a *Adapter) Close() error {
	if a == nil || a.file == nil {
		return nil
	}
	err := a.file.Close()
	a.file = nil
	return err
}

// Open reads and validates an adapter file (only a regular file is opened; see safetensors.Open).
func Open(path string) (*Adapter, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	a, err := FromFile(path, f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return a, nil
}

// FromFile validates an opened safetensors file as an adapter; the adapter owns f from then on
// (Close closes it).
func FromFile(name string, f *safetensors.File) (*Adapter, error) {
	meta, err := parseMetadata(f.Metadata)
	if err != nil {
		return nil, fmt.Errorf("lora: adapter %s: %w", name, err)
	}
	ups, err := group(f)
	if err != nil {
		return nil, fmt.Errorf("lora: adapter %s: %w", name, err)
	}
	for _, u := range ups {
		if err := u.finish(meta); err != nil {
			return nil, fmt.Errorf("lora: adapter %s: %w", name, err)
		}
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("lora: adapter %s holds no tensors: the file is empty, not a LoRA adapter", name)
	}
	return &Adapter{Name: name, Updates: ups, file: f}, nil
}

// group parses every key and gathers the keys of each module.
func group(f *safetensors.File) ([]*Update, error) {
	byModule := map[string]*Update{}
	adapterName := ""
	names := f.Names()
	sort.Strings(names)
	for _, key := range names {
		p, err := parseKey(key)
		if err != nil {
			return nil, err
		}
		if p.adapter != "" {
			if adapterName != "" && adapterName != p.adapter {
				return nil, fmt.Errorf("key %q belongs to PEFT adapter %q but other keys to %q: the file holds several adapters; save each on its own", key, p.adapter, adapterName)
			}
			adapterName = p.adapter
		}
		info, _ := f.Tensor(key)
		u := byModule[p.module]
		if u == nil {
			u = &Update{Module: p.module, Musubi: p.musubi}
			byModule[p.module] = u
		} else if u.Musubi != p.musubi {
			return nil, fmt.Errorf("key %q: module %q is named both with and without the musubi %q prefix; the file mixes layouts", key, p.module, musubiPrefix)
		}
		if p.adapter != "" {
			u.PEFTAdapter = p.adapter
		}
		if err := u.add(p, &info); err != nil {
			return nil, err
		}
	}
	ups := make([]*Update, 0, len(byModule))
	for _, u := range byModule {
		sort.Strings(u.Keys)
		ups = append(ups, u)
	}
	sort.Slice(ups, func(i, j int) bool { return ups[i].Module < ups[j].Module })
	return ups, nil
}

// add files one key under its role, refusing a second key for the same role (two spellings of one
// module, e.g. with and without the diffusion_model. prefix).
func (u *Update) add(p parsedKey, info *safetensors.Info) error {
	slot := map[role]**safetensors.Info{
		roleA: &u.a, roleB: &u.b, roleLoRABias: &u.loraBias, roleAlpha: &u.alphaKey,
		roleLoRAAlpha: &u.loraAlphaK, roleRank: &u.rankKey, roleDiff: &u.diff, roleDiffBias: &u.diffBias,
		roleSet: &u.set,
	}[p.role]
	if *slot != nil {
		return fmt.Errorf("keys %q and %q both give the %s of module %q: the file spells one module twice; remove one", (*slot).Name, p.key, p.role, u.Module)
	}
	if err := checkDType(p, info); err != nil {
		return err
	}
	*slot = info
	u.Keys = append(u.Keys, p.key)
	return nil
}

// checkDType admits F32/F16/BF16 data (F64 too for the scalar alpha) and I32/I64 for lora_rank.
func checkDType(p parsedKey, info *safetensors.Info) error {
	ok := false
	switch p.role {
	case roleRank:
		ok = info.DType == safetensors.I32 || info.DType == safetensors.I64
	case roleAlpha, roleLoRAAlpha:
		ok = info.DType.IsFloat() || info.DType == safetensors.I32 || info.DType == safetensors.I64
	default:
		ok = info.DType == safetensors.F32 || info.DType == safetensors.F16 || info.DType == safetensors.BF16
	}
	if !ok {
		return fmt.Errorf("key %q has dtype %s; a LoRA %s must be F32, F16 or BF16 (lora_rank: I32/I64): re-save the adapter in one of them", p.key, info.DType, p.role)
	}
	return nil
}

// finish checks the module's parts against each other and settles rank and alpha.
func (u *Update) finish(meta metadata) error {
	if err := u.checkParts(); err != nil {
		return err
	}
	if u.a != nil {
		if err := u.checkPair(); err != nil {
			return err
		}
		if err := u.settleAlpha(meta); err != nil {
			return err
		}
	}
	if err := u.checkDense(); err != nil {
		return err
	}
	for _, t := range []*safetensors.Info{u.a, u.b, u.loraBias, u.diff, u.diffBias, u.set} {
		if t != nil {
			if err := checkFinite(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkParts refuses a half pair and scalars without the pair they describe.
func (u *Update) checkParts() error {
	switch {
	case u.a != nil && u.b == nil:
		return fmt.Errorf("key %q has no up-projection partner (%s.lora_B.weight or .lora_up.weight): the file is truncated or mixes layouts", u.a.Name, u.Module)
	case u.b != nil && u.a == nil:
		return fmt.Errorf("key %q has no down-projection partner (%s.lora_A.weight or .lora_down.weight): the file is truncated or mixes layouts", u.b.Name, u.Module)
	}
	if u.a == nil {
		for _, t := range []*safetensors.Info{u.alphaKey, u.loraAlphaK, u.rankKey, u.loraBias} {
			if t != nil {
				return fmt.Errorf("key %q describes a low-rank pair, but module %q has no lora_A/lora_B (lora_down/lora_up) weights: the file is truncated or mixes layouts", t.Name, u.Module)
			}
		}
	}
	if u.set != nil && (u.a != nil || u.diff != nil) {
		return fmt.Errorf("key %q replaces module %q's weight, which other keys of the file also change (%s): an adapter must do one or the other", u.set.Name, u.Module, strings.Join(u.Keys, ", "))
	}
	return nil
}

// checkPair validates A [r,in] and B [out,r].
func (u *Update) checkPair() error {
	a, b := u.a, u.b
	if len(a.Shape) != 2 || len(b.Shape) != 2 {
		return fmt.Errorf("keys %q %v and %q %v: LoRA factors must be 2-D matrices (convolution LoRAs are not supported)", a.Name, a.Shape, b.Name, b.Shape)
	}
	r, in, out := a.Shape[0], a.Shape[1], b.Shape[0]
	if b.Shape[1] != r {
		return fmt.Errorf("rank mismatch in module %q: %q is %v (rank %d) but %q is %v (rank %d): A must be [r,in] and B [out,r]; the file is corrupt or its A and B belong to different adapters", u.Module, a.Name, a.Shape, r, b.Name, b.Shape, b.Shape[1])
	}
	if r < 1 || in < 1 || out < 1 {
		return fmt.Errorf("module %q: empty LoRA factors %q %v, %q %v: the file is corrupt", u.Module, a.Name, a.Shape, b.Name, b.Shape)
	}
	if r > MaxRank || r > min(in, out) {
		return fmt.Errorf("module %q: rank %d of %q %v is absurd (above min(in, out) = %d or the limit %d): a low-rank factor cannot be wider than its matrix; the file is corrupt or a dense matrix is stored under a LoRA name", u.Module, r, a.Name, a.Shape, min(in, out), MaxRank)
	}
	if _, ok := safetensors.ByteSize(safetensors.F32, []int{out, in}); !ok {
		return fmt.Errorf("module %q: the product %q x %q is [%d, %d], too large to form", u.Module, b.Name, a.Name, out, in)
	}
	if lb := u.loraBias; lb != nil && (len(lb.Shape) != 1 || lb.Shape[0] != out) {
		return fmt.Errorf("key %q has shape %v; a lora_B.bias must be [%d], the up-projection's output size", lb.Name, lb.Shape, out)
	}
	u.Rank, u.In, u.Out = r, in, out
	return u.checkRankKey()
}

// checkRankKey compares FastVideo's .lora_rank with the factors.
func (u *Update) checkRankKey() error {
	if u.rankKey == nil {
		return nil
	}
	vals, err := u.rankKey.Int64s()
	if err != nil {
		return fmt.Errorf("key %q: %v", u.rankKey.Name, err)
	}
	if len(vals) != 1 || vals[0] != int64(u.Rank) {
		return fmt.Errorf("key %q says rank %v but %q has rank %d: the file is corrupt; remove the .lora_rank key to trust the factors", u.rankKey.Name, vals, u.a.Name, u.Rank)
	}
	return nil
}

// checkDense validates the dense parts' shapes (their targets are checked at merge time).
func (u *Update) checkDense() error {
	for _, t := range []*safetensors.Info{u.diff, u.set} {
		if t != nil && len(t.Shape) == 0 {
			return fmt.Errorf("key %q is a scalar; a weight delta or replacement must have the weight's shape", t.Name)
		}
	}
	if t := u.diffBias; t != nil && len(t.Shape) != 1 {
		return fmt.Errorf("key %q has shape %v; a bias delta (.diff_b) must be 1-D", t.Name, t.Shape)
	}
	return nil
}

// checkFinite scans a tensor's raw values for NaN and ±Inf without decoding it.
func checkFinite(t *safetensors.Info) error {
	idx := -1
	d := t.Data
	switch t.DType {
	case safetensors.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			if bits := uint32(d[i]) | uint32(d[i+1])<<8 | uint32(d[i+2])<<16 | uint32(d[i+3])<<24; bits&0x7f800000 == 0x7f800000 {
				idx = i / 4
				break
			}
		}
	case safetensors.F16:
		for i := 0; i+2 <= len(d); i += 2 {
			if (uint16(d[i])|uint16(d[i+1])<<8)&0x7c00 == 0x7c00 {
				idx = i / 2
				break
			}
		}
	case safetensors.BF16:
		for i := 0; i+2 <= len(d); i += 2 {
			if (uint16(d[i])|uint16(d[i+1])<<8)&0x7f80 == 0x7f80 {
				idx = i / 2
				break
			}
		}
	}
	if idx >= 0 {
		return fmt.Errorf("key %q holds a NaN or infinite value (element %d of %v): the adapter is corrupt or was saved from a diverged training run; use another checkpoint of it", t.Name, idx, t.Shape)
	}
	return nil
}

// finiteScalar decodes a one-element float tensor.
func finiteScalar(t *safetensors.Info) (float64, error) {
	if t.NumElements() != 1 {
		return 0, fmt.Errorf("key %q has shape %v; it must hold one value", t.Name, t.Shape)
	}
	var v float64
	if t.DType.IsFloat() {
		vals, err := t.Float64s()
		if err != nil {
			return 0, fmt.Errorf("key %q: %v", t.Name, err)
		}
		v = vals[0]
	} else {
		vals, err := t.Int64s()
		if err != nil {
			return 0, fmt.Errorf("key %q: %v", t.Name, err)
		}
		v = float64(vals[0])
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("key %q is %v; an alpha must be a finite positive number", t.Name, v)
	}
	return v, nil
}

// Factors decodes the low-rank pair to float32: A [Rank, In] and B [Out, Rank], row-major, without alpha
// or strength (for a run-time low-rank path; Merge does not need it).
func (u *Update) Factors() (a, b []float32, err error) {
	if u.a == nil {
		return nil, nil, fmt.Errorf("lora: module %q has no low-rank pair", u.Module)
	}
	if a, err = u.a.Float32s(); err != nil {
		return nil, nil, err
	}
	if b, err = u.b.Float32s(); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}

// SetDefaultAlpha gives every low-rank module whose alpha the file does not state (alpha = rank by
// default) this alpha instead: the trainer's alpha for files saved without it (LightX2V's H3 Turbo
// adapters assume 8 when their metadata has none: ModelTC/Minimax-H3-Turbo inference_minimax_h3.py).
func (a *Adapter) SetDefaultAlpha(alpha float64) error {
	if !(alpha > 0) || math.IsInf(alpha, 0) {
		return fmt.Errorf("lora: adapter %s: default alpha %v must be a finite positive number", a.Name, alpha)
	}
	for _, u := range a.Updates {
		if u.Rank > 0 && u.AlphaFrom == defaultAlpha {
			u.Alpha, u.AlphaFrom = alpha, "the caller's default alpha"
		}
	}
	return nil
}

// BiasDeltas decodes the bias deltas: loraBias (lora_B.bias, scaled like B·A) and diffBias (.diff_b,
// scaled by the strength only); nil when absent.
func (u *Update) BiasDeltas() (loraBias, diffBias []float32, err error) {
	return decodeOptional(u.loraBias, u.diffBias)
}

// Dense decodes the dense weight delta (.diff/.diff_m) and the replacement (.set_weight); nil when absent.
// Their shape is DenseShape.
func (u *Update) Dense() (diff, set []float32, err error) {
	return decodeOptional(u.diff, u.set)
}

func decodeOptional(x, y *safetensors.Info) (xv, yv []float32, err error) {
	if x != nil {
		if xv, err = x.Float32s(); err != nil {
			return nil, nil, err
		}
	}
	if y != nil {
		if yv, err = y.Float32s(); err != nil {
			return nil, nil, err
		}
	}
	return xv, yv, nil
}
