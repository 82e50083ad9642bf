package wan

import (
	"fmt"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph code reads better unqualified

	"fastvideo/attention"
	"fastvideo/internal/graphexec"
)

// windowKey identifies one windowed block executable: the window is a graph constant (the block map
// is built from it and the sequence length at compile time).
type windowKey struct {
	window attention.Window
	multi  bool // per-token timesteps (the executable takes TIdx)
}

// planWindow checks a forward's window against its l tokens and the VSA request; it returns nil when
// the forward is dense (no window, or one of l tokens or more: the dense executables then run, bit
// for bit).
func planWindow(w *attention.Window, vsa *VSA, l int) (*attention.Window, error) {
	if w == nil {
		return nil, nil
	}
	if vsa != nil {
		return nil, fmt.Errorf("wan: ForwardInputs.Window and ForwardInputs.VSA are both set; use one (windowed or Video Sparse Attention)")
	}
	if err := w.Check(l); err != nil {
		return nil, fmt.Errorf("wan: ForwardInputs.Window: %w", err)
	}
	if w.Dense(l) {
		return nil, nil
	}
	return w, nil
}

// windowExec returns the block executable whose self-attention runs under window w (cross-attention
// stays dense, as fastvideo/mlx_runtime/fastwan.py windows only the self-attention).
func (m *Model) windowExec(w *attention.Window, multi bool) *Exec {
	key := windowKey{window: *w, multi: multi}
	spec := m.spec
	spec.Window = &key.window
	e, _ := m.windowExecs.Get(key, func() (*Exec, error) {
		return graphexec.MustExec(m.backend, "wan.block_window", blockFn(spec, multi, false)), nil
	})
	return e
}
