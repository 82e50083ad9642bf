package h3

import (
	"fmt"

	h3dit "fastvideo/dit/h3"
	"fastvideo/fastvideo/family"
)

// DevicePlan lays the DiT out tensor-parallel over devices devices (family.DeviceSplitter): each holds
// its shard of the joint blocks and the replicated rest, plus the activation allowance.
func (c *components) DevicePlan(devices int) (*family.DevicePlan, error) {
	sp, err := h3dit.PlanShards(c.spec.DiT, c.Engine.DType, devices)
	if err != nil {
		return nil, &family.RequestError{Field: "devices", Value: devices, Allowed: fmt.Sprintf(
			"a count that divides the DiT's %d attention heads and FFN width %d (%v)", c.spec.DiT.NumAttentionHeads, c.spec.DiT.FFNDim, err)}
	}
	return &family.DevicePlan{Devices: devices, Split: family.TensorParallel, LocalHeads: sp.LocalHeads, LocalFFN: sp.LocalFFN,
		DiTShardBytes: sp.ShardedBytes, DiTReplicatedBytes: sp.ReplicatedBytes}, nil
}
