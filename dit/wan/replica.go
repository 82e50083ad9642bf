package wan

import (
	"fmt"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
)

// Replica returns a second model of the same weights that runs its forwards on device dev, for
// classifier-free guidance split over two devices (docs/architecture.md, "Tensor parallelism"): the
// conditional forward on m and the unconditional on the replica, at the same time from two
// goroutines. On another device the weights are copied there device to device (the replica owns the
// copies); on m's own device (a backend with one device: the CPU reference of the split) it reads m's
// weights and holds only its own executables and caches, so it must be closed before m. Either way
// the replica computes what m computes.
func (m *Model) Replica(dev compute.DeviceNum) (r *Model, err error) {
	defer graphexec.Recover(&err, "wan: replicating the model")
	if m.p == nil {
		return nil, fmt.Errorf("wan: model is closed")
	}
	if n := m.backend.NumDevices(); int(dev) < 0 || int(dev) >= n {
		return nil, fmt.Errorf("wan: a replica on device %d: the backend %s has %d device(s)", dev, m.backend.Name(), n)
	}
	r = &Model{
		cfg: m.cfg, backend: m.backend, dtype: m.dtype, p: declareParams(m.cfg), spec: m.spec,
		vsaExecs: modelkit.ExecCache[vsaKey]{}, windowExecs: modelkit.ExecCache[windowKey]{},
		rope:   modelkit.NewRopeCache(func(a, b [3]int) bool { return a == b }),
		device: dev, sharesWeights: dev == m.device,
	}
	r.rope.Device = dev
	if err := r.placeWeights(m); err != nil {
		return nil, err
	}
	return r, r.finish()
}

// placeWeights binds r's parameters to m's: the same tensors on m's device, device copies elsewhere.
func (r *Model) placeWeights(m *Model) error {
	from, to := m.p.set.Params(), r.p.set.Params()
	ts := make([]*tensors.Tensor, len(from))
	for i, q := range from {
		ts[i] = q.T // nil for an optional weight the checkpoint lacks (the VSA gates)
	}
	if !r.sharesWeights {
		var err error
		if ts, err = graphexec.CopyAllToDevice(m.backend, ts, r.device); err != nil {
			return fmt.Errorf("wan: copying the weights to device %d: %w", r.device, err)
		}
	}
	for i, t := range ts {
		to[i].T = t
	}
	return nil
}

// Device is the device the model's weights live on and its forwards run on.
func (m *Model) Device() compute.DeviceNum { return m.device }

// call runs a single-device executable on the model's device.
func (m *Model) call(e *Exec, args ...any) ([]*tensors.Tensor, error) {
	return graphexec.CallOn(e, m.device, args...)
}
