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

// spmdRunner runs a tensor-parallel model's joint blocks as one SPMD program per block, shard k on
// device k.
type spmdRunner struct {
	backend compute.Backend
	w       *shardedWeights
	compile spmdCompiler
	// programs are the block programs met so far, dense and VSA.
	programs map[shardVSAKey]*Exec
}

// newSPMDRunner moves shard k's slices to devices[k] and copies its norms there (device 0 keeps the
// norms of the parameter set), and makes the joint blocks run through compile.
func newSPMDRunner(backend compute.Backend, w *shardedWeights, devices []compute.DeviceNum, compile spmdCompiler) (r *spmdRunner, err error) {
	defer graphexec.Recover(&err, "h3: placing the shards on their devices")
	w.devices = devices
	for _, shards := range w.blocks {
		for k, sw := range shards {
			dev := devices[k]
			if dev == 0 {
				continue
			}
			// The slices are this shard's alone: move them (the device-0 copy is freed).
			for _, t := range sw.slices() {
				if *t == nil {
					continue
				}
				if err := (*t).MaterializeOnDevice(backend, false, dev); err != nil {
					return nil, err
				}
			}
			norms := []*tensors.Tensor{sw.Norm1, sw.Norm2, sw.NormQ, sw.NormK}
			copies, err := graphexec.CopyAllToDevice(backend, norms, dev)
			if err != nil {
				return nil, err
			}
			w.copies = append(w.copies, copies...)
			sw.Norm1, sw.Norm2, sw.NormQ, sw.NormK = copies[0], copies[1], copies[2], copies[3]
		}
	}
	return &spmdRunner{backend: backend, w: w, compile: compile}, nil
}

func (r *spmdRunner) describe() string {
	return fmt.Sprintf("%d shards on devices %v, one SPMD program per block (all-reduce)", r.w.n(), r.w.devices)
}

func (r *spmdRunner) heldBytes() (sliced, copies int64) { return r.w.heldBytes() }

func (r *spmdRunner) close() {
	for _, e := range r.programs {
		graphexec.FinalizeExecs(e)
	}
	r.programs = nil
	r.w.close()
}

// exec returns (compiling at first use) joint block b's program under the forward's VSA plan p (nil:
// the dense program every block shares).
func (r *spmdRunner) exec(p *vsaPlan, b int, trace bool) *Exec {
	spec, shape := r.w.spec, r.w.blocks[b][0].shape // sharded blocks are dense
	key, name := shardVSAKey{trace: trace}, "h3.joint_block_spmd"
	if p != nil {
		key.sparse, key.vsa = true, p.key(b, r.w.blocks[b][0].Gate != nil)
		spec.Attention.Sparse, shape.gate, name = p.sparse(key.vsa), key.vsa.gate, name+"_vsa"
	}
	if e, ok := r.programs[key]; ok {
		return e
	}
	e := r.compile(r.backend, name, r.w.devices, func(reduce AllReduce) func(in []*Node) []*Node {
		s := spec
		s.AllReduce = reduce
		return jointBlockFn(s, shape, trace)
	})
	if r.programs == nil {
		r.programs = map[shardVSAKey]*Exec{}
	}
	r.programs[key] = e
	return e
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

// run runs every joint block as one SPMD program on x (consumed, on device 0) and returns device 0's
// output of the last block.
func (r *spmdRunner) run(x *tensors.Tensor, f *blockForward) (*tensors.Tensor, error) {
	copies := &deviceCopies{backend: r.backend, devices: r.w.devices, made: map[*tensors.Tensor][]*tensors.Tensor{}}
	defer copies.close()
	copies.owned = append(copies.owned, x) // the first block's input, freed with its copies
	xs, err := copies.of(x)
	if err != nil {
		return nil, err
	}
	args := f.args
	for b := range r.w.blocks {
		args.Mod = f.tables[b]
		outs, dev0, err := r.runBlock(b, xs, args, copies, f)
		if b > 0 {
			graphexec.Finalize(xs...)
		}
		if err != nil {
			return nil, err
		}
		xs = outs
		if err := f.traceBlock(b, dev0); err != nil {
			graphexec.Finalize(xs...)
			return nil, err
		}
	}
	graphexec.Finalize(xs[1:]...)
	return xs[0], nil
}

// runBlock runs joint block b on every shard's device at once (with VSA when the forward runs it), xs
// being its input on each. It returns the block output on each device and device 0's outputs (the
// block output, then, when tracing, the all-reduced attention and FFN outputs).
func (r *spmdRunner) runBlock(b int, xs []*tensors.Tensor, args blockInputs[*tensors.Tensor], copies *deviceCopies, f *blockForward) (outs, dev0 []*tensors.Tensor, err error) {
	exec := r.exec(f.vsa, b, f.trace != nil)
	gate := f.vsa != nil && r.w.blocks[b][0].Gate != nil
	var call []any
	for k, w := range r.w.blocks[b] {
		a := args
		a.X = xs[k]
		for _, f := range a.Fields()[1:] {
			per, err := copies.of(*f)
			if err != nil {
				return nil, nil, err
			}
			*f = per[k]
		}
		call = append(call, graphexec.Pack(&a, graphexec.Values(w.withGate(gate))...)...)
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

// jointBlockFn is the graph of one joint block, fed blockInputs and the block's weights of shape: with
// a shard's spec (local heads and FFN, the all-reduce hook, VSA's Sparse or not) every device's
// program of the SPMD tensor-parallel block.
func jointBlockFn(spec blockSpec, shape blockShape, trace bool) func(in []*Node) []*Node {
	return func(in []*Node) []*Node {
		var a blockInputs[*Node]
		w := graphWeights(shape)
		graphexec.Unpack(graphexec.Unpack(in, &a), w)
		c := coreOf(w)
		spec.check(c)
		out, attnOut, ffOut := spec.jointBlock(a.X, a.Mod, a.RowIdx, a.Cos, a.Sin, c)
		return traced(trace, 1, out, attnOut, ffOut)
	}
}
