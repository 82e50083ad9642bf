package h3

import (
	"github.com/gomlx/compute/dtypes"

	"fmt"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
	"fastvideo/vae/h3video"
)

// DevicePlan lays the DiT out tensor-parallel over devices devices (family.DeviceSplitter): each holds
// its shard of the joint blocks and the replicated rest, a replica of the video VAE decoder for its
// clips (videoVAEOptions), plus the activation allowance.
// PlanDevices is DevicePlan for the specification alone, in compute dtype dt (family.SpecSplitter).
func (s *Spec) PlanDevices(devices int, dt dtypes.DType) (*api.DevicePlan, error) {
	return (&components{Opened: familykit.Opened[source]{Engine: &family.Engine{DType: dt, Devices: devices}}, spec: s}).DevicePlan(devices)
}

func (c *components) DevicePlan(devices int) (*api.DevicePlan, error) {
	sp, err := h3dit.PlanShards(c.spec.DiT, c.Engine.DType, devices)
	if err != nil {
		return nil, &api.RequestError{Field: "devices", Value: devices, Allowed: fmt.Sprintf(
			"a count that divides the DiT's %d attention heads and FFN width %d (%v)", c.spec.DiT.NumAttentionHeads, c.spec.DiT.FFNDim, err)}
	}
	return &api.DevicePlan{Devices: devices, Split: api.TensorParallel, LocalHeads: sp.LocalHeads, LocalFFN: sp.LocalFFN,
		DiTShardBytes: sp.ShardedBytes, DiTReplicatedBytes: sp.ReplicatedBytes,
		VideoVAEBytes: familykit.ParamBytes(h3video.Params(c.spec.VAE))(int64(c.Engine.DType.Size()))}, nil
}

// videoVAEOptions are the video decoder's options: the engine's dtype and attention, and its clips
// spread over the engine's devices (docs/architecture.md, "Tensor parallelism"). A backend with fewer
// devices (New refuses that; tests set Engine.Devices on the pure-Go backend) decodes on device 0, as
// the DiT then runs its shards in turn there.
func videoVAEOptions(e *family.Engine) h3video.Options {
	return h3video.Options{DType: e.DType, Attention: e.Attention, Devices: min(max(e.Devices, 1), e.Backend.NumDevices())}
}
