package h3

import (
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
)

// blockRunner runs the joint blocks of a forward, one implementation per execution strategy: one
// device with runs of blocks per program (groupedRunner), the tensor-parallel shards in turn on one
// device (shardRunner) or at once as one SPMD program per block (spmdRunner). A strategy picks its
// attention (dense or VSA) per block from the forward's VSA plan, and its linears' kind from the
// block weights' shape.
type blockRunner interface {
	// run runs every joint block on x (consumed) and returns the last block's output.
	run(x *tensors.Tensor, f *blockForward) (*tensors.Tensor, error)
	// describe says how the blocks run: "" for one device, else the shard count and the path.
	describe() string
	// heldBytes is the memory of the weights the runner holds beside the parameter set: the shards'
	// slices, and the norms copied to other devices.
	heldBytes() (sliced, copies int64)
	// close frees the runner's executables and what it holds.
	close()
}

// blockForward is what every strategy needs of one forward.
type blockForward struct {
	// args are the row indices and the RoPE tables every block reads (X and Mod are set per block).
	args blockInputs[*tensors.Tensor]
	// tables are each block's AdaLN modulation table.
	tables []*tensors.Tensor
	// vsa is the forward's Video Sparse Attention (nil: dense).
	vsa *vsaPlan
	// trace receives the first and last blocks' outputs (tests; nil: none).
	trace graphexec.Trace
}

// traced returns all when tracing, else only the first n outputs.
func traced(trace bool, n int, all ...*Node) []*Node {
	if trace {
		return all
	}
	return all[:n]
}

// chainBlocks runs the blocks on x (consumed) one program at a time: step runs the program that
// starts at block b and returns the block after it and the program's outputs (the new x first).
func chainBlocks(x *tensors.Tensor, f *blockForward, step func(b int, x *tensors.Tensor) (int, []*tensors.Tensor, error)) (*tensors.Tensor, error) {
	for b := 0; b < len(f.tables); {
		next, res, err := step(b, x)
		graphexec.Finalize(x)
		if err != nil {
			return nil, err
		}
		x = res[0]
		if err := f.traceBlock(b, res); err != nil {
			graphexec.Finalize(x)
			return nil, err
		}
		b = next
	}
	return x, nil
}

// traceBlock hands the tests the first block's outputs and the last block's, and frees the extra
// outputs of a traced block.
func (f *blockForward) traceBlock(b int, res []*tensors.Tensor) error {
	if f.trace == nil {
		return nil
	}
	defer graphexec.Finalize(res[1:]...)
	if b == 0 {
		for i, name := range []string{"block0_out", "block0_attn_out", "block0_ff_out"} {
			if err := f.trace.Emit("h3", name, res[i]); err != nil {
				return err
			}
		}
	}
	if b == len(f.tables)-1 {
		return f.trace.Emit("h3", "block_last_out", res[0])
	}
	return nil
}

// blockInputs feed one joint block, followed by its weights (blockWeights): X [L, D], Mod [R, 6, D],
// RowIdx [L] int32, Cos and Sin [L, rot] float32.
type blockInputs[T any] struct{ X, Mod, RowIdx, Cos, Sin T }

func (a *blockInputs[T]) Fields() []*T { return []*T{&a.X, &a.Mod, &a.RowIdx, &a.Cos, &a.Sin} }
