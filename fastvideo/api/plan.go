package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// Plan is what a request will run, derived without loading any weights: geometry, the sampling
// ladder and the cost of a DiT forward, plus the family's own Details (MiniMax H3: audio latents,
// packed rows and both ladders; Wan: the token grid and the sampler). Its JSON is one flat object
// with stable snake_case names: the common fields, then the details'.
type Plan struct {
	Model  string `json:"model"`
	Preset string `json:"preset"`
	Family string `json:"family"`

	Height          int     `json:"height"` // output size
	Width           int     `json:"width"`
	CanvasHeight    int     `json:"canvas_height"` // size the DiT and VAE run at
	CanvasWidth     int     `json:"canvas_width"`
	RequestedFrames int     `json:"requested_frames"`
	NumFrames       int     `json:"num_frames"` // output frames, after the family's alignment
	FPS             int     `json:"fps"`
	DurationSeconds float64 `json:"duration_seconds"`
	Steps           int     `json:"steps"` // sampling steps
	Seed            int64   `json:"seed"`

	VideoLatentFrames int `json:"video_latent_frames"`
	LatentHeight      int `json:"latent_height"`
	LatentWidth       int `json:"latent_width"`
	LatentChannels    int `json:"latent_channels"`
	// LatentShape is the video latent [C, T, H, W].
	LatentShape []int `json:"latent_shape"`

	GuidanceScale float64 `json:"guidance_scale"`
	// CFG is classifier-free guidance: ForwardsPerStep is then 2 (prompt and negative prompt).
	CFG             bool `json:"cfg"`
	ForwardsPerStep int  `json:"forwards_per_step"`

	// VideoSigmas and VideoTimesteps are the video ladder: the sigma and the timestep fed to the DiT
	// at each step.
	VideoSigmas    []float32 `json:"video_sigmas"`
	VideoTimesteps []float32 `json:"video_timesteps"`

	// DiTTFLOPsPerStep counts every forward of a step (both with CFG).
	DiTTFLOPsPerStep float64 `json:"dit_tflops_per_step"`
	DiTTFLOPsTotal   float64 `json:"dit_tflops_total"`
	DiTParams        int64   `json:"dit_params"`
	WeightsDType     DType   `json:"weights_dtype"`
	// WeightsBytes is the DiT's weight memory in WeightsDType: the largest component and the one
	// resident while denoising.
	WeightsBytes int64 `json:"weights_bytes"`

	// Decoder is the video decoder that runs: "full" (the model's VAE) or "tiny" (TAEHV);
	// TinyDecoder the TAEHV variant when the tiny decoder runs (Decoder "tiny" or Preview):
	// "taew2_1", "taew2_2" or "taeh3". Preview says whether the steps carry previews.
	Decoder     string `json:"decoder"`
	TinyDecoder string `json:"tiny_decoder,omitempty"`
	Preview     bool   `json:"preview,omitempty"`

	// FrameFilters names the frame filters the resolution adds before the caller's, in order (the
	// fast modes' crop, resize and sharpen).
	FrameFilters []string `json:"frame_filters,omitempty"`

	// Devices is the multi-device layout (nil on one device).
	Devices *DevicePlan `json:"devices,omitempty"`

	// LoRA lists the adapters merged into the DiT at load, in order, and what each changes.
	LoRA []PlanLoRA `json:"lora,omitempty"`

	// CompileCache says where compiled programs are kept between runs and what this build keeps
	// there (fastvideo.WithCompileCache); empty in plans made without the SDK's options.
	CompileCache string `json:"compile_cache,omitempty"`

	// Memory is each heavyweight component's device bytes and where it lives between calls: the
	// memory policy's decision for the device the plan was made for (without one, the sizes alone,
	// residency empty).
	Memory []ComponentResidency `json:"memory,omitempty"`

	// Details are the family's own fields (e.g. *h3.PlanDetails, *wan.PlanDetails).
	Details PlanDetails `json:"-"`
}

// PlanDetails are a family's own plan fields; they marshal to a JSON object whose fields join the
// plan's, and write the plan's table.
type PlanDetails interface {
	WriteTable(w io.Writer, p *Plan) error
}

// VideoNoiseLen is the length of Request.VideoNoise: C·T·Hl·Wl.
func (p *Plan) VideoNoiseLen() int {
	return p.LatentChannels * p.VideoLatentFrames * p.LatentHeight * p.LatentWidth
}

// MarshalJSON writes the common fields followed by the details' fields, as one object.
func (p *Plan) MarshalJSON() ([]byte, error) {
	type common Plan // without this method
	out, err := json.Marshal((*common)(p))
	if err != nil || p.Details == nil {
		return out, err
	}
	details, err := json.Marshal(p.Details)
	if err != nil {
		return nil, err
	}
	details = bytes.TrimSpace(details)
	if len(details) < 2 || details[0] != '{' {
		return nil, fmt.Errorf("fastvideo: plan details of family %s are not a JSON object", p.Family)
	}
	if string(details) == "{}" {
		return out, nil
	}
	return append(append(out[:len(out)-1], ','), details[1:]...), nil
}

// WriteTable prints the plan as a readable table (the family's layout).
func (p *Plan) WriteTable(w io.Writer) error {
	if p.Details != nil {
		return p.Details.WriteTable(w, p)
	}
	tw, row := NewTable(w)
	row("model", "%s (preset %s)", p.Model, p.Preset)
	row("output", "%dx%d (HxW), %d frames at %d fps = %.3f s", p.Height, p.Width, p.NumFrames, p.FPS, p.DurationSeconds)
	row("steps", "%d, seed %d", p.Steps, p.Seed)
	return tw.Flush()
}

// ResourceRows writes the rows every family's plan table ends its model rows with: the DiT's
// weights, the video decoder, the components' memory, the adapters and the compile cache.
func ResourceRows(row func(key, format string, a ...any), p *Plan) {
	row("dit weights", "%.2f B params, %.2f GiB in %s", float64(p.DiTParams)/1e9, float64(p.WeightsBytes)/(1<<30), p.WeightsDType)
	DecoderRow(row, p)
	MemoryRows(row, p.Memory)
	LoRARows(row, p.LoRA)
	CompileCacheRow(row, p.CompileCache)
}

// CompileCacheRow writes the plan table's compile cache row (none when the plan has no note).
func CompileCacheRow(row func(key, format string, a ...any), note string) {
	if note != "" {
		row("compile cache", "%s", note)
	}
}

// NewTable returns a two-column table writer and its row function.
func NewTable(w io.Writer) (*tabwriter.Writer, func(key, format string, a ...any)) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	return tw, func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
}

// DevicePlan is how a generation spreads over the accelerators of one host.
type DevicePlan struct {
	Devices int `json:"devices"`
	// Split is TensorParallel or CFGParallel.
	Split string `json:"split"`
	// LocalHeads and LocalFFN are one device's attention heads and FFN width of the DiT.
	LocalHeads int `json:"local_heads"`
	LocalFFN   int `json:"local_ffn"`
	// DiTShardBytes is one device's part of the split DiT weights; DiTReplicatedBytes what every
	// device holds whole (text refiner, AdaLN, norms, embedders, heads).
	DiTShardBytes      int64 `json:"dit_shard_bytes"`
	DiTReplicatedBytes int64 `json:"dit_replicated_bytes"`
	// VideoVAEBytes is the video VAE decoder every device holds whole to decode its clips.
	VideoVAEBytes int64 `json:"video_vae_bytes,omitempty"`
	// ActivationBytes is the allowance for activations and compiled programs on each device.
	ActivationBytes int64 `json:"activation_bytes"`
	// PerDeviceBytes is what each device must hold: the sum of the above (an upper bound where the DiT
	// is released before the VAE loads).
	PerDeviceBytes int64 `json:"per_device_bytes"`
}

// Breakdown is what each device holds, in GiB, for tables and messages.
func (d *DevicePlan) Breakdown() string {
	g := func(n int64) float64 { return float64(n) / (1 << 30) }
	if d.Split == CFGParallel {
		return fmt.Sprintf("%.2f GiB = DiT %.2f + activations %.2f", g(d.PerDeviceBytes), g(d.DiTReplicatedBytes), g(d.ActivationBytes))
	}
	return fmt.Sprintf("%.2f GiB = DiT shard %.2f + replicated %.2f + video VAE %.2f + activations %.2f", g(d.PerDeviceBytes),
		g(d.DiTShardBytes), g(d.DiTReplicatedBytes), g(d.VideoVAEBytes), g(d.ActivationBytes))
}

// Ways a generation splits over devices (DevicePlan.Split).
const (
	// TensorParallel splits the DiT's heads and FFN width: each device holds its shard of the split
	// weights and the replicated rest.
	TensorParallel = "tensor_parallel"
	// CFGParallel runs the two forwards of classifier-free guidance at once, the conditional on device 0
	// and the unconditional on device 1, each device holding the whole DiT (DiTReplicatedBytes).
	CFGParallel = "cfg_parallel"
)

// DecoderRow writes the plan-table row of the video decoder.
func DecoderRow(row func(key, format string, a ...any), p *Plan) {
	d := p.Decoder
	if p.Decoder == DecoderTiny {
		d += " (TAEHV " + p.TinyDecoder + ")"
	}
	if p.Preview {
		d += fmt.Sprintf("; previews each step by TAEHV %s", p.TinyDecoder)
	}
	row("decoder", "%s", d)
}
