package wan

import (
	"fastvideo/fastvideo/api"
	"fastvideo/fastvideo/familykit"
)

// windowAsked reports whether the request sets an attention window.
func (r *resolved) windowAsked() bool {
	w := r.opts.AttentionWindow
	return w != nil && w.Tokens != 0
}

// resolveWindow validates the request's attention window (fastvideo/mlx_runtime/windowed_attention.py)
// against the run's forwards (refine's stage 1 is the smallest) and names it in the plan's attention
// row; it runs before resolveVSA, which it turns off.
func (r *resolved) resolveWindow(api.Request) error {
	minTokens := r.Geometry.Tokens
	if rf := r.refine; rf != nil {
		minTokens = min(minTokens, rf.stage1.Tokens)
	}
	vsaAsked := r.opts.VSA != nil && !r.opts.VSA.Off
	w, err := familykit.ResolveWindow(r.opts.AttentionWindow, minTokens, vsaAsked)
	if err != nil || w == nil {
		return err
	}
	g := r.Geometry
	r.attentionWhy = familykit.WindowRow(*w, g.TokenHeight*g.TokenWidth, g.Tokens)
	if r.spec.VSAGates {
		r.attentionWhy += "; runs instead of the checkpoint's Video Sparse Attention"
	}
	if !w.Dense(g.Tokens) {
		r.window = w
	}
	return nil
}

// warnWindow reports a windowed run's drift warning in Result.Warnings and as a Warning event.
func (p *run) warnWindow() {
	if w := p.r.window; w != nil {
		msg := familykit.WindowWarning(*w)
		p.s.Result.Warnings = append(p.s.Result.Warnings, msg)
		p.s.Emit(api.Event{Kind: api.Warning, Message: msg})
	}
}
