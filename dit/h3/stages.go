package h3

import (
	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/internal/graphexec"
	"fastvideo/internal/nn"
)

// stageExecs are the executables of one forward around the joint blocks (which the model's
// blockRunner runs); the traced set also returns intermediates.
type stageExecs struct {
	time, adaln, normOut, text, refiner, finalNorm, input, output *Exec
}

func (s *stageExecs) Finalize() {
	graphexec.FinalizeExecs(s.time, s.adaln, s.normOut, s.text, s.refiner, s.finalNorm, s.input, s.output)
}

// timeInputs feed the time MLP (float32), followed by the rank-r AdaLN basis when the model has one.
type timeInputs[T any] struct{ Proj, W1, B1, W2, B2 T }

func (a *timeInputs[T]) Fields() []*T { return []*T{&a.Proj, &a.W1, &a.B1, &a.W2, &a.B2} }

// inputInputs pack the embedded video, audio and text rows into the sequence order (Perm [L] int32
// indexes concat(text, video, audio)).
type inputInputs[T any] struct {
	Video, Audio, Text, Perm             T
	ProjInW, ProjInB, AudioInW, AudioInB T
}

func (a *inputInputs[T]) Fields() []*T {
	return []*T{&a.Video, &a.Audio, &a.Text, &a.Perm, &a.ProjInW, &a.ProjInB, &a.AudioInW, &a.AudioInB}
}

// outputInputs feed the output head: X [L, D], NormOut [R, 2, D], TIdx [L] int32, the norm weight,
// the video and audio row indices and the two float32 projections.
type outputInputs[T any] struct {
	X, NormOut, TIdx, Norm, VideoIdx, AudioIdx T
	ProjOutW, ProjOutB, AudioOutW, AudioOutB   T
}

func (a *outputInputs[T]) Fields() []*T {
	return []*T{&a.X, &a.NormOut, &a.TIdx, &a.Norm, &a.VideoIdx, &a.AudioIdx, &a.ProjOutW, &a.ProjOutB, &a.AudioOutW, &a.AudioOutB}
}

// rowsInput feeds a refiner block its rows, followed by the block's weights.
type rowsInput[T any] struct{ X T }

func (a *rowsInput[T]) Fields() []*T { return []*T{&a.X} }

func newStageExecs(backend compute.Backend, cfg Config, spec blockSpec, dt dtypes.DType, refinerLayout linearLayout, trace bool) *stageExecs {
	hidden := cfg.HiddenSize
	s := &stageExecs{
		// -> cond [nT, Din] (adaln dtype), temb [nT, Dt] f32 (traced)
		time: graphexec.MustExec(backend, "h3.time", func(in []*Node) []*Node {
			var a timeInputs[*Node]
			var basis *Node
			if rest := graphexec.Unpack(in, &a); len(rest) > 0 {
				basis = rest[0]
			}
			temb := timeEmbedding(a.Proj, a.W1, a.B1, a.W2, a.B2)
			return traced(trace, 1, adaLNInput(temb, basis, dt), temb)
		}),
		// cond, w, b -> [nT·3, 6, D] in the compute dtype
		adaln: graphexec.MustExec(backend, "h3.adaln", func(cond, w, b *Node) *Node {
			return ConvertDType(modulationTable(cond, w, b, hidden), dt)
		}),
		normOut: graphexec.MustExec(backend, "h3.norm_out_table", func(cond, w, b *Node) *Node {
			return ConvertDType(normOutTable(cond, w, b, hidden), dt)
		}),
		// text [S, text_dim] f32, w, b -> [S, D]
		text: graphexec.MustExec(backend, "h3.context_embedder", func(text, w, b *Node) *Node {
			return nn.Linear(ConvertDType(text, w.DType()), w, b)
		}),
		refiner: graphexec.MustExec(backend, "h3.refiner_block", func(in []*Node) []*Node {
			var a rowsInput[*Node]
			w := graphWeights(blockShape{schemes: refinerLayout})
			graphexec.Unpack(graphexec.Unpack(in, &a), w)
			return []*Node{spec.refinerBlock(a.X, coreOf(w))}
		}),
		finalNorm: graphexec.MustExec(backend, "h3.refiner_final_norm", func(x, w *Node) *Node {
			return nn.RMSNorm(x, w, cfg.FinalNormEps)
		}),
		input: graphexec.MustExec(backend, "h3.input", func(in []*Node) []*Node {
			var a inputInputs[*Node]
			graphexec.Unpack(in, &a)
			ve := nn.Linear(a.Video, a.ProjInW, a.ProjInB)
			ae := nn.Linear(a.Audio, a.AudioInW, a.AudioInB)
			all := Concatenate([]*Node{a.Text, ConvertDType(ve, a.Text.DType()), ConvertDType(ae, a.Text.DType())}, 0)
			return traced(trace, 1, Gather(all, ExpandAxes(a.Perm, -1)), ve, ae)
		}),
		output: graphexec.MustExec(backend, "h3.output", func(in []*Node) []*Node {
			var a outputInputs[*Node]
			graphexec.Unpack(in, &a)
			tab := Gather(ConvertDType(a.NormOut, a.X.DType()), ExpandAxes(a.TIdx, -1))
			shift := Squeeze(Slice(tab, AxisRange(), AxisElem(0), AxisRange()), 1)
			scale := Squeeze(Slice(tab, AxisRange(), AxisElem(1), AxisRange()), 1)
			y := ConvertDType(nn.Modulate(nn.RMSNorm(a.X, a.Norm, cfg.FinalNormEps), shift, scale), dtypes.Float32)
			video := nn.Linear(Gather(y, ExpandAxes(a.VideoIdx, -1)), a.ProjOutW, a.ProjOutB)
			audio := nn.Linear(Gather(y, ExpandAxes(a.AudioIdx, -1)), a.AudioOutW, a.AudioOutB)
			return traced(trace, 2, video, audio, y)
		}),
	}
	return s
}
