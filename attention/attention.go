// Package attention is the one scaled-dot-product attention entry point of the SDK.
//
// Attend takes q, k, v in BSHD layout ([batch, seq, heads, headDim]) and returns the attention output in
// the layout of q. It chooses between two implementations:
//
//   - the fused path: GoMLX's attention.Core, which lowers to cuDNN flash attention on xla:cuda. It is
//     taken only when q/k/v are bf16 or f16, the head width is a multiple of 8 and the backend lists
//     compute.OpTypeFusedScaledDotProductAttention. Outside those conditions attention.Core would
//     silently decompose and materialize [B,H,Lq,Lk] scores in the input dtype, so we never rely on that.
//   - the exact path: scores, softmax and the weighted sum of values in float32 (inputs converted to
//     float32 first), output cast back to the dtype of q. This is the oracle used on CPU and in parity tests.
//
// Options.Path forces a choice (PathExact is the switch that turns the fast path back into the oracle when
// hunting a numerical difference). This package reads no environment: binaries parse FASTVIDEO_ATTENTION
// (EnvVar) or a flag with ParsePath and pass the Path down through the models' options. Forcing the fused
// path where it cannot run is an error, reported by Resolve and raised as a panic by Attend at graph
// build time, so that a mis-configured run fails loudly instead of falling back silently.
package attention

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified
	gmattn "github.com/gomlx/gomlx/ml/layers/attention"
)

// EnvVar names the environment variable the binaries read (with ParsePath) to force an attention path.
const EnvVar = "FASTVIDEO_ATTENTION"

// Path selects an attention implementation.
type Path int

const (
	// PathAuto (the zero value) uses the fused kernel when the backend and dtype allow it, the exact path
	// otherwise.
	PathAuto Path = iota
	// PathExact always uses the decomposed float32 computation.
	PathExact
	// PathFused always uses the fused kernel; it is an error where the kernel is not available.
	PathFused
)

// String returns the name ParsePath reads.
func (p Path) String() string {
	switch p {
	case PathAuto:
		return "auto"
	case PathExact:
		return "exact"
	case PathFused:
		return "fused"
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// ParsePath parses a FASTVIDEO_ATTENTION value: "exact", "fused", "auto" (case-insensitive); the empty
// string gives PathAuto.
func ParsePath(s string) (Path, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return PathAuto, nil
	case "exact":
		return PathExact, nil
	case "fused":
		return PathFused, nil
	}
	return PathAuto, fmt.Errorf("attention: %s=%q is not a known path; use exact, fused or auto", EnvVar, s)
}

// Options configures Attend. The zero value is the usual choice: scale 1/sqrt(headDim), automatic path.
type Options struct {
	// Scale multiplies q·k before the softmax; 0 means 1/sqrt(headDim).
	Scale float64
	// Path forces an implementation; PathAuto (zero) chooses by backend, dtype and head width.
	Path Path
	// Sparse, when set, makes the attention block-sparse (Video Sparse Attention, see Sparse). The fused
	// path then runs the fused kernel on each query tile's gathered key tiles; the exact path is the
	// masked dense oracle (small sequences: it materializes [H, L, L]).
	Sparse *Sparse
	// Window, when set, makes self-attention windowed with sink tokens (see Window; not with Sparse).
	// PathExact then runs the masked dense oracle, every other path the block path; a window of the
	// whole sequence or more is the dense attention of the path.
	Window *Window
}

// Resolve returns the path Attend will take for inputs of the given dtype and head width on backend, or an
// error when the requested path cannot run there. Call it before building graphs to report configuration
// problems as errors.
func Resolve(backend compute.Backend, dtype dtypes.DType, headDim int, opts Options) (Path, error) {
	if w := opts.Window; w != nil {
		if opts.Sparse != nil {
			return PathAuto, fmt.Errorf("attention: Options.Window and Options.Sparse are both set; use one (windowed or block-sparse attention)")
		}
		if err := w.checkSizes(); err != nil {
			return PathAuto, err
		}
	}
	fusedOK, why := fusedAvailable(backend, dtype, headDim)
	switch opts.Path {
	case PathExact:
		return PathExact, nil
	case PathFused:
		if !fusedOK {
			return PathAuto, fmt.Errorf("attention: fused path forced (%s or Options.Path) but %s; "+
				"use %s=exact or auto, or run on xla:cuda with bf16/f16", EnvVar, why, EnvVar)
		}
		return PathFused, nil
	case PathAuto:
		if fusedOK {
			return PathFused, nil
		}
		return PathExact, nil
	}
	return PathAuto, fmt.Errorf("attention: unknown path %v; use exact, fused or auto", opts.Path)
}

func fusedAvailable(backend compute.Backend, dtype dtypes.DType, headDim int) (bool, string) {
	if backend == nil {
		return false, "there is no backend"
	}
	if !backend.Capabilities().Operations[compute.OpTypeFusedScaledDotProductAttention] {
		return false, fmt.Sprintf("backend %q has no fused scaled-dot-product attention", backend.Name())
	}
	if dtype != dtypes.BFloat16 && dtype != dtypes.Float16 {
		return false, fmt.Sprintf("dtype is %s (the fused kernel needs bfloat16 or float16)", dtype)
	}
	if headDim%8 != 0 {
		return false, fmt.Sprintf("head width %d is not a multiple of 8", headDim)
	}
	return true, ""
}

// Attend computes softmax(scale·q·kᵀ)·v without a mask, or with Options.Sparse or Options.Window the
// block-sparse or windowed attention they describe.
//
// q is [B, Lq, H, D]; k and v are [B, Lk, H, D] (Lk may differ from Lq). The result is [B, Lq, H, D] in
// the dtype of q. Attend panics (graph-building convention) when the forced path cannot run; callers
// that need an error should call Resolve first.
func Attend(q, k, v *Node, opts Options) *Node {
	checkShapes(q, k, v)
	headDim := q.Shape().Dim(-1)
	scale := opts.Scale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(headDim))
	}
	if opts.Sparse != nil && opts.Path == pathGathered {
		return attendSparse(q, k, v, opts.Sparse, scale, pathGathered)
	}
	path, err := Resolve(q.Graph().Backend(), q.DType(), headDim, opts)
	if err != nil {
		panic(err)
	}
	if opts.Sparse != nil {
		return attendSparse(q, k, v, opts.Sparse, scale, path)
	}
	if w := opts.Window; w != nil {
		if err := w.Check(q.Shape().Dim(1)); err != nil {
			panic(err)
		}
		if !w.Dense(q.Shape().Dim(1)) {
			return attendWindow(q, k, v, *w, scale, opts.Path == PathExact)
		}
	}
	if path == PathFused {
		out, _ := gmattn.Core(q, k, v, gmattn.LayoutBSHD, gmattn.CoreOptions{Scale: scale})
		return out
	}
	return Exact(q, k, v, scale)
}

// Exact is the decomposed attention with float32 scores and softmax; q, k, v in BSHD, result in q's dtype.
func Exact(q, k, v *Node, scale float64) *Node {
	checkShapes(q, k, v)
	dt := q.DType()
	qf := ConvertDType(q, dtypes.Float32)
	kf := ConvertDType(k, dtypes.Float32)
	vf := ConvertDType(v, dtypes.Float32)
	// scores [B, H, Lq, Lk]: contract D, batch over B and H.
	s := Dot(qf, kf).General([]int{3}, []int{0, 2}, []int{3}, []int{0, 2})
	p := Softmax(MulScalar(s, scale), -1)
	// p [B,H,Lq,Lk] · v [B,Lk,H,D] -> [B,H,Lq,D]
	o := Dot(p, vf).General([]int{3}, []int{0, 1}, []int{1}, []int{0, 2})
	o = TransposeAllAxes(o, 0, 2, 1, 3)
	return ConvertDType(o, dt)
}

func checkShapes(q, k, v *Node) {
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	if qs.Rank() != 4 || ks.Rank() != 4 || vs.Rank() != 4 {
		panic(fmt.Errorf("attention: q, k, v must be BSHD rank 4, got %s, %s, %s", qs, ks, vs))
	}
	if !ks.Equal(vs) {
		panic(fmt.Errorf("attention: k %s and v %s must have the same shape", ks, vs))
	}
	if qs.Dim(0) != ks.Dim(0) || qs.Dim(2) != ks.Dim(2) || qs.Dim(3) != ks.Dim(3) {
		panic(fmt.Errorf("attention: q %s and k %s must agree on batch, heads and head width", qs, ks))
	}
	if q.DType() != k.DType() || q.DType() != v.DType() {
		panic(fmt.Errorf("attention: q, k, v dtypes differ: %s, %s, %s", q.DType(), k.DType(), v.DType()))
	}
}
