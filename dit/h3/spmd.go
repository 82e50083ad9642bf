package h3

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
)

// The SPMD tensor-parallel joint block (docs/architecture.md, "Tensor parallelism"). When the backend has
// at least Options.Shards devices, shard k's slices live on device k (the norms replicated on each) and
// every joint block runs as ONE program replicated over the devices (XLA replicas): each device runs the
// whole model's block graph (jointBlockFn) with its shard's local heads and FFN width, and the two
// partial outputs are completed by an all-reduce, so every device ends the block holding the full
// output and the next block starts without a transfer. The embedders, the text refiner, AdaLN and the
// output heads (well under 1 % of the FLOPs) stay on device 0: the packed input, the RoPE tables, the
// row indices and each block's AdaLN table are copied to the other devices once per forward, and
// device 0's output of the last block goes to the output heads.
//
// With fewer devices the shards run one after the other on device 0, their partials summed in the next
// executable (runShardedBlock): the fallback and the CPU reference of this path.

// spmdProgram builds one device's graph of the block with reduce as its all-reduce.
type spmdProgram func(reduce AllReduce) func(in []*Node) []*Node

// spmdCompiler makes the executable that runs program on n devices, fed device-major arguments (device
// 0's inputs, then device 1's, ...) and returning device-major outputs.
type spmdCompiler func(backend compute.Backend, name string, devices []compute.DeviceNum, program spmdProgram) *Exec

// spmdPlacement is where the shards of an SPMD model live.
type spmdPlacement struct {
	devices []compute.DeviceNum // shard k's device
	// copies are the replicated weights placed on devices other than 0 (the model owns them).
	copies  []*tensors.Tensor
	compile spmdCompiler
}

// xlaSPMD compiles program as an XLA SPMD executable over a 1-D mesh of the devices, the all-reduce
// summing over the mesh.
func xlaSPMD(backend compute.Backend, name string, devices []compute.DeviceNum, program spmdProgram) *Exec {
	mesh, err := distributed.NewDeviceMesh([]int{len(devices)}, []string{"shards"})
	if err != nil {
		panic(err)
	}
	sum := func(x *Node) *Node { return x.Graph().Distributed().AllReduceOne(x, compute.ReduceOpSum) }
	return graphexec.MustExec(backend, name, program(sum)).SPMD(mesh).WithDeviceAssignment(devices)
}

// TensorParallel says how the joint blocks run: "" for a whole model, else the shard count and the path.
func (m *Model) TensorParallel() string {
	switch {
	case m.shards == nil:
		return ""
	case m.shards.spmd != nil:
		return fmt.Sprintf("%d shards on devices %v, one SPMD program per block (all-reduce)", m.shards.n(), m.shards.spmd.devices)
	}
	return fmt.Sprintf("%d shards in turn on device 0, partial outputs summed (the backend has %d device(s))",
		m.shards.n(), m.backend.NumDevices())
}

// placeShards moves shard k's slices to devices[k] and copies its norms there, and makes the joint
// blocks run through compile. Device 0 keeps the norms of the parameter set.
func (m *Model) placeShards(devices []compute.DeviceNum, compile spmdCompiler) (err error) {
	defer graphexec.Recover(&err, "h3: placing the shards on their devices")
	sp := &spmdPlacement{devices: devices, compile: compile}
	m.shards.spmd = sp
	for b, shards := range m.shards.weights {
		for k, w := range shards {
			dev := devices[k]
			if dev == 0 {
				continue
			}
			// The slices are this shard's alone: move them (the device-0 copy is freed).
			slices := w[numBlockNorms:]
			if g := m.shards.gates[b]; g != nil {
				slices = append(slices[:len(slices):len(slices)], g[k])
			}
			for _, t := range slices {
				if err := t.MaterializeOnDevice(m.backend, false, dev); err != nil {
					return err
				}
			}
			norms, err := graphexec.CopyAllToDevice(m.backend, w[:numBlockNorms], dev)
			if err != nil {
				return err
			}
			sp.copies = append(sp.copies, norms...)
			copy(w, norms)
		}
	}
	return nil
}

// newSPMDExec is the SPMD block executable of a placed model.
func (m *Model) newSPMDExec(trace bool) *Exec {
	spec, sp := m.shards.spec, m.shards.spmd
	return sp.compile(m.backend, "h3.joint_block_spmd", sp.devices, func(reduce AllReduce) func(in []*Node) []*Node {
		spec.AllReduce = reduce
		return jointBlockFn(spec, m.p.BlockLayout, false, false, trace) // sharded blocks are dense
	})
}

// deviceCopies are one forward's copies of device-0 tensors on the other shards' devices, made once
// each and freed when the forward ends.
type deviceCopies struct {
	backend compute.Backend
	devices []compute.DeviceNum
	made    map[*tensors.Tensor][]*tensors.Tensor
	owned   []*tensors.Tensor
}

// of returns t on every shard's device, in shard order.
func (c *deviceCopies) of(t *tensors.Tensor) ([]*tensors.Tensor, error) {
	if per, ok := c.made[t]; ok {
		return per, nil
	}
	per := make([]*tensors.Tensor, len(c.devices))
	for k, dev := range c.devices {
		if dev == 0 {
			per[k] = t
			continue
		}
		cp, err := graphexec.CopyToDevice(c.backend, t, dev)
		if err != nil {
			return nil, err
		}
		c.owned = append(c.owned, cp)
		per[k] = cp
	}
	c.made[t] = per
	return per, nil
}

func (c *deviceCopies) close() { graphexec.Finalize(c.owned...) }

// runSPMDBlocks runs every joint block as one SPMD program on x (consumed, on device 0) and returns
// device 0's output of the last block.
func (m *Model) runSPMDBlocks(x *tensors.Tensor, args blockInputs[*tensors.Tensor], cache *AdaLNCache, vsa *vsaPlan) (*tensors.Tensor, error) {
	copies := &deviceCopies{backend: m.backend, devices: m.shards.spmd.devices, made: map[*tensors.Tensor][]*tensors.Tensor{}}
	defer copies.close()
	copies.owned = append(copies.owned, x) // the first block's input, freed with its copies
	xs, err := copies.of(x)
	if err != nil {
		return nil, err
	}
	for b := range m.p.Blocks {
		args.Mod = cache.tables[b]
		outs, dev0, err := m.runSPMDBlock(b, xs, args, copies, vsa)
		if b > 0 {
			graphexec.Finalize(xs...)
		}
		if err != nil {
			return nil, err
		}
		xs = outs
		if err := m.traceBlock(b, dev0); err != nil {
			graphexec.Finalize(xs...)
			return nil, err
		}
	}
	graphexec.Finalize(xs[1:]...)
	return xs[0], nil
}

// runSPMDBlock runs joint block b on every shard's device at once (with VSA when vsa is set), xs being
// its input on each. It returns the block output on each device and device 0's outputs (the block
// output, then, when tracing, the all-reduced attention and FFN outputs).
func (m *Model) runSPMDBlock(b int, xs []*tensors.Tensor, args blockInputs[*tensors.Tensor], copies *deviceCopies, vsa *vsaPlan) (outs, dev0 []*tensors.Tensor, err error) {
	exec := m.execs().shard.spmd
	if vsa != nil {
		exec = m.shardVSAExec(vsa, b)
	}
	var call []any
	for k := range m.shards.weights[b] {
		a := args
		a.X = xs[k]
		for _, f := range a.Fields()[1:] {
			per, err := copies.of(*f)
			if err != nil {
				return nil, nil, err
			}
			*f = per[k]
		}
		call = append(call, graphexec.Pack(&a, m.shardInputs(vsa, b, k)...)...)
	}
	res, err := graphexec.Call(exec, call...)
	if err != nil {
		return nil, nil, err
	}
	per := len(res) / len(xs)
	for k := range xs {
		outs = append(outs, res[k*per])
		if k > 0 {
			graphexec.Finalize(res[k*per+1 : (k+1)*per]...)
		}
	}
	return outs, res[:per], nil
}
