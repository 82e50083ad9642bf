package qwen3vl

import (
	"encoding/json"
	"fmt"

	"fastvideo/internal/modelcfg"
)

// VisionPrefix is the tensor-name prefix of the vision tower in released Qwen3-VL checkpoints
// (`model.visual.patch_embed.proj.weight`, ...).
const VisionPrefix = "model.visual."

// visionLayerNormEps is the epsilon of every LayerNorm of the vision tower: the reference builds
// them with eps=1e-6 regardless of the config (fastvideo/models/encoders/minimax_h3_qwen3_vl.py).
const visionLayerNormEps = 1e-6

// VisionConfig is the geometry of the Qwen3-VL vision tower ("vision_config" of config.json) and
// the special token ids of the image placeholders (top level of config.json).
type VisionConfig struct {
	Depth                  int    `json:"depth"`
	HiddenSize             int    `json:"hidden_size"`
	HiddenAct              string `json:"hidden_act"`
	IntermediateSize       int    `json:"intermediate_size"`
	NumHeads               int    `json:"num_heads"`
	InChannels             int    `json:"in_channels"`
	PatchSize              int    `json:"patch_size"`
	SpatialMergeSize       int    `json:"spatial_merge_size"`
	TemporalPatchSize      int    `json:"temporal_patch_size"`
	OutHiddenSize          int    `json:"out_hidden_size"`
	NumPositionEmbeddings  int    `json:"num_position_embeddings"`
	DeepstackVisualIndexes []int  `json:"deepstack_visual_indexes"`

	ImageTokenID       int `json:"-"`
	VisionStartTokenID int `json:"-"`
	VisionEndTokenID   int `json:"-"`
}

// ParseVisionConfig reads the vision tower's config from a Qwen3-VL config.json (its
// "vision_config" object and the top-level token ids).
func ParseVisionConfig(raw []byte) (VisionConfig, error) {
	var top struct {
		Vision      *VisionConfig `json:"vision_config"`
		ImageToken  *int          `json:"image_token_id"`
		VisionStart *int          `json:"vision_start_token_id"`
		VisionEnd   *int          `json:"vision_end_token_id"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return VisionConfig{}, fmt.Errorf("qwen3vl: config is not valid JSON: %v", err)
	}
	if top.Vision == nil {
		return VisionConfig{}, fmt.Errorf("qwen3vl: config has no vision_config: FL2VA needs the full Qwen3-VL config.json of text_encoder/")
	}
	if top.ImageToken == nil || top.VisionStart == nil || top.VisionEnd == nil {
		return VisionConfig{}, fmt.Errorf("qwen3vl: config lacks image_token_id, vision_start_token_id or vision_end_token_id")
	}
	cfg := *top.Vision
	cfg.ImageTokenID, cfg.VisionStartTokenID, cfg.VisionEndTokenID = *top.ImageToken, *top.VisionStart, *top.VisionEnd
	return modelcfg.Valid(cfg)
}

// LoadVisionConfig reads dir/config.json (dir may also be the file itself).
func LoadVisionConfig(path string) (VisionConfig, error) {
	return modelcfg.Read(path, ParseVisionConfig, "qwen3vl", "")
}

// Validate checks the geometry, naming every bad field.
func (c VisionConfig) Validate() error {
	var bad modelcfg.Problems
	pos := bad.Positive
	pos("vision_config.hidden_size", c.HiddenSize)
	pos("vision_config.intermediate_size", c.IntermediateSize)
	pos("vision_config.num_heads", c.NumHeads)
	pos("vision_config.in_channels", c.InChannels)
	pos("vision_config.patch_size", c.PatchSize)
	pos("vision_config.spatial_merge_size", c.SpatialMergeSize)
	pos("vision_config.temporal_patch_size", c.TemporalPatchSize)
	pos("vision_config.out_hidden_size", c.OutHiddenSize)
	pos("vision_config.num_position_embeddings", c.NumPositionEmbeddings)
	bad.Layers("vision_config.depth", c.Depth)
	if c.NumHeads > 0 && (c.HiddenSize%c.NumHeads != 0 || (c.HiddenSize/c.NumHeads)%4 != 0) {
		bad.Add("vision_config.hidden_size = %d must split into num_heads = %d heads of a width divisible by 4 (2-D rotary halves)", c.HiddenSize, c.NumHeads)
	}
	if side := c.gridSide(); side*side != c.NumPositionEmbeddings {
		bad.Add("vision_config.num_position_embeddings = %d must be a square (the learned position grid)", c.NumPositionEmbeddings)
	}
	if c.HiddenAct != "" && c.HiddenAct != "gelu_pytorch_tanh" {
		bad.Add("vision_config.hidden_act = %q is not supported: Qwen3-VL's vision MLP uses gelu_pytorch_tanh", c.HiddenAct)
	}
	for i, d := range c.DeepstackVisualIndexes {
		if d < 0 || d >= c.Depth || (i > 0 && d <= c.DeepstackVisualIndexes[i-1]) {
			bad.Add("vision_config.deepstack_visual_indexes %v must be increasing block indexes below depth %d", c.DeepstackVisualIndexes, c.Depth)
			break
		}
	}
	return bad.Err("qwen3vl")
}

// gridSide is the side of the learned position-embedding grid.
func (c VisionConfig) gridSide() int {
	s := 0
	for (s+1)*(s+1) <= c.NumPositionEmbeddings {
		s++
	}
	return s
}

// HeadDim is the width of one attention head.
func (c VisionConfig) HeadDim() int { return c.HiddenSize / c.NumHeads }

// PatchDim is the length of one flattened input patch (channels x temporal x spatial patch).
func (c VisionConfig) PatchDim() int {
	return c.InChannels * c.TemporalPatchSize * c.PatchSize * c.PatchSize
}

// MergeArea is how many patches merge into one vision token.
func (c VisionConfig) MergeArea() int { return c.SpatialMergeSize * c.SpatialMergeSize }

// Q32BVision is the vision tower shipped with MiniMax H3 (the vision_* defaults of
// fastvideo/configs/models/encoders/minimax_h3_qwen3_vl.py), for plans and random-weight runs;
// real runs read the snapshot's config.json.
func Q32BVision() VisionConfig {
	return VisionConfig{Depth: 27, HiddenSize: 1152, HiddenAct: "gelu_pytorch_tanh", IntermediateSize: 4304, NumHeads: 16,
		InChannels: 3, PatchSize: 16, SpatialMergeSize: 2, TemporalPatchSize: 2, OutHiddenSize: 5120,
		NumPositionEmbeddings: 2304, DeepstackVisualIndexes: []int{8, 16, 24},
		ImageTokenID: 151655, VisionStartTokenID: 151652, VisionEndTokenID: 151653}
}
