package wan

import (
	"github.com/gomlx/compute/dtypes"

	"fmt"

	"github.com/gomlx/compute"

	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/family"
	"fastvideo/fastvideo/familykit"
)

// cfgDevices is the device count of the CFG-parallel split: one per guidance branch.
const cfgDevices = 2

// DevicePlan lays a model with classifier-free guidance out CFG-parallel over two devices
// (family.DeviceSplitter, docs/architecture.md "Tensor parallelism"): the conditional forward of each
// step on device 0, the unconditional one at the same time on device 1 with a replica of the DiT, so
// each device holds the whole DiT plus the activation allowance (the 14B's 28.6 GB bf16 copy fits an
// 80 GB or larger device; the plan refuses a device without room before anything loads). Models
// without guidance are refused: there is nothing to split.
// PlanDevices is DevicePlan for the specification alone, in compute dtype dt (family.SpecSplitter).
func (s *Spec) PlanDevices(devices int, dt dtypes.DType) (*api.DevicePlan, error) {
	return (&components{Opened: familykit.Opened[source]{Engine: &family.Engine{DType: dt, Devices: devices}}, spec: s}).DevicePlan(devices)
}

func (c *components) DevicePlan(devices int) (*api.DevicePlan, error) {
	s := c.spec
	refuse := func(why string) error {
		return &api.RequestError{Field: "devices", Value: devices, Allowed: "1: " + why}
	}
	switch {
	case !s.hasCFG():
		return nil, refuse(fmt.Sprintf("%s runs without classifier-free guidance (one DiT forward per step), and guidance "+
			"is what Wan splits over devices (its two forwards per step, one on each)", s.Name))
	case devices != cfgDevices:
		return nil, refuse(fmt.Sprintf("or %d: Wan splits classifier-free guidance over devices, the conditional forward "+
			"on one and the unconditional on the other", cfgDevices))
	}
	f32, half, err := paramGroups(s.DiT)
	if err != nil {
		return nil, err
	}
	dit, err := familykit.WeightBytes(f32, half, api.DTypeOf(c.Engine.DType))
	if err != nil {
		return nil, err
	}
	return &api.DevicePlan{Devices: devices, Split: api.CFGParallel, LocalHeads: s.DiT.NumAttentionHeads,
		LocalFFN: s.DiT.FFNDim, DiTReplicatedBytes: dit}, nil
}

// hasCFG reports whether any preset of the model guides with a negative prompt: UniPC at a guidance
// scale above 1 (the FastWan students' DMD presets never do).
func (s *Spec) hasCFG() bool {
	for _, p := range s.presets {
		if p.Sampler == SamplerUniPC && p.GuidanceScale > 1 {
			return true
		}
	}
	return false
}

// uncondDevice is where a CFG-parallel run's unconditional forwards go: device 1, or device 0 where
// the backend has only one (the pure-Go backend: the replica then shares the DiT's weights and the
// two forwards still run at once, the CPU reference of the split).
func (c *components) uncondDevice() compute.DeviceNum {
	if c.Engine.Backend.NumDevices() >= cfgDevices {
		return 1
	}
	return 0
}

// cfgParallel reports whether this run's guidance forwards split over two devices.
func (p *run) cfgParallel() bool {
	return p.c.Engine.Devices >= cfgDevices && p.r.CFG && p.r.steps.unipc != nil
}
