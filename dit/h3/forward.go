package h3

import (
	"fmt"

	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/modelkit"
)

// ropeFor returns the device RoPE tables [L, rot] of positions (reused while the layout is unchanged).
func (m *Model) ropeFor(pos []float64) (cos, sin *tensors.Tensor, err error) {
	cos, sin, err = m.rope.Tables(m.backend, pos, len(pos)/3, m.cfg.RotaryDim(), func() ([]float32, []float32) {
		return RopeTables(pos, m.cfg.RopeFreqDim, m.cfg.RopeTheta)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("h3: %w", err)
	}
	return cos, sin, nil
}

// TextState is a prompt refined by context_embedder and the token refiner: timestep-free, so computed
// once per generation and reused by every step (and by both CFG branches if any). Close frees it.
type TextState struct{ modelkit.TextRows }

// PrepareText runs context_embedder and the token refiner on text features [S, text_dim] (row-major).
func (m *Model) PrepareText(text []float32) (ts *TextState, err error) {
	defer graphexec.Recover(&err, "h3: text refiner")
	if m.p == nil {
		return nil, fmt.Errorf("h3: model is closed")
	}
	td := m.cfg.TextDim
	s, err := modelkit.TextCount(text, td, "h3: text features")
	if err != nil {
		return nil, err
	}
	ex := m.execs()
	out, err := graphexec.Call(ex.text, tensors.FromFlatDataAndDimensions(text, s, td), m.p.ContextEmbedder.W.T, m.p.ContextEmbedder.B.T)
	if err != nil {
		return nil, err
	}
	x := out[0]
	if err := m.emit("context_embedder", x); err != nil {
		return nil, err
	}
	for j := range m.p.Refiner {
		w := boundWeights(&m.p.Refiner[j], false, nil)
		out, err := graphexec.Call(ex.refiner, graphexec.Pack(&rowsInput[*tensors.Tensor]{X: x}, graphexec.Values(w)...)...)
		graphexec.Finalize(x)
		if err != nil {
			return nil, err
		}
		x = out[0]
		if j == 0 {
			if err := m.emit("refiner_block0", x); err != nil {
				return nil, err
			}
		}
	}
	out, err = graphexec.Call(ex.finalNorm, x, m.p.RefinerFinalNorm.T)
	graphexec.Finalize(x)
	if err != nil {
		return nil, err
	}
	if err := m.emit("refined_text", out[0]); err != nil {
		return nil, err
	}
	return &TextState{modelkit.NewTextRows(s, out[0])}, nil
}

// ForwardInputs is one packed document (batch 1), as host slices in row-major order.
type ForwardInputs struct {
	// VideoRows [Nv, in_channels·pt·ph·pw]: patchified video latents (channel-major patch features), the
	// rows listed by VideoIndices in that order.
	VideoRows []float32
	// AudioRows [Na, audio_in_channels], the rows listed by AudioIndices.
	AudioRows []float32
	// Text [S, text_dim] conditioner features; ignored when TextState is set.
	Text []float32
	// TextState is the prompt from PrepareText (reuse it across steps).
	TextState *TextState
	// Timesteps are the unique row timesteps of this step (t = 1 − sigma, in [0, 1]).
	Timesteps []float32
	// TimestepIndices [L] maps each packed row to Timesteps.
	TimestepIndices []int32
	// TokenTags [L]: 0 video, 1 text, 2 audio (selects the AdaLN modality).
	TokenTags []int32
	// PositionIDs [L, 3] RoPE coordinates (t, h, w), float64 as the packing code builds them.
	PositionIDs []float64
	// VideoIndices, AudioIndices, TextIndices partition [0, L).
	VideoIndices, AudioIndices, TextIndices []int32
	// AdaLN, when set, supplies the modulation tables (PrepareAdaLN); every timestep must be in its ladder.
	// Without it the tables are computed from the AdaLN projections (or taken from the checkpoint cache).
	AdaLN *AdaLNCache
	// VSA, when set, runs the joint blocks with Video Sparse Attention.
	VSA *VSA
}

// ForwardOutputs are the predicted velocities, float32.
type ForwardOutputs struct {
	Video []float32 // [Nv, in_channels·pt·ph·pw]
	Audio []float32 // [Na, audio_in_channels]
}

// rowLayout is the validated geometry of one forward.
type rowLayout struct {
	l, nv, na, s int
	perm         []int32 // packed row -> row of concat(text, video, audio)
}

func (m *Model) checkInputs(in *ForwardInputs) (*rowLayout, error) {
	l := len(in.TokenTags)
	if l == 0 {
		return nil, fmt.Errorf("h3: ForwardInputs.TokenTags is empty; one tag per packed row is required")
	}
	if len(in.TimestepIndices) != l {
		return nil, fmt.Errorf("h3: ForwardInputs.TimestepIndices has %d entries, TokenTags %d: both need one per packed row", len(in.TimestepIndices), l)
	}
	if len(in.PositionIDs) != 3*l {
		return nil, fmt.Errorf("h3: ForwardInputs.PositionIDs has %d values, want 3 × %d rows", len(in.PositionIDs), l)
	}
	lay := &rowLayout{l: l, nv: len(in.VideoIndices), na: len(in.AudioIndices), s: len(in.TextIndices)}
	if lay.nv+lay.na+lay.s != l {
		return nil, fmt.Errorf("h3: index lists cover %d+%d+%d rows (video+audio+text), the sequence has %d", lay.nv, lay.na, lay.s, l)
	}
	if len(in.VideoRows) != lay.nv*m.cfg.VideoPatchDim() {
		return nil, fmt.Errorf("h3: ForwardInputs.VideoRows has %d values, want %d rows × %d", len(in.VideoRows), lay.nv, m.cfg.VideoPatchDim())
	}
	if len(in.AudioRows) != lay.na*m.cfg.AudioInChannels {
		return nil, fmt.Errorf("h3: ForwardInputs.AudioRows has %d values, want %d rows × %d", len(in.AudioRows), lay.na, m.cfg.AudioInChannels)
	}
	if in.TextState != nil {
		if in.TextState.Tensor() == nil {
			return nil, fmt.Errorf("h3: ForwardInputs.TextState was closed")
		}
		if in.TextState.Rows() != lay.s {
			return nil, fmt.Errorf("h3: TextState has %d rows, TextIndices %d", in.TextState.Rows(), lay.s)
		}
	} else if len(in.Text) != lay.s*m.cfg.TextDim {
		return nil, fmt.Errorf("h3: ForwardInputs.Text has %d values, want %d rows × text_dim %d", len(in.Text), lay.s, m.cfg.TextDim)
	}
	if lay.s == 0 || lay.nv == 0 || lay.na == 0 {
		return nil, fmt.Errorf("h3: the document has %d text, %d video and %d audio rows; H3 needs at least one of each", lay.s, lay.nv, lay.na)
	}
	if len(in.Timesteps) == 0 {
		return nil, fmt.Errorf("h3: ForwardInputs.Timesteps is empty")
	}
	if err := modelkit.CheckFinite("ForwardInputs.Timesteps", in.Timesteps); err != nil {
		return nil, fmt.Errorf("h3: %w", err)
	}
	for r := 0; r < l; r++ {
		if ti := in.TimestepIndices[r]; ti < 0 || int(ti) >= len(in.Timesteps) {
			return nil, fmt.Errorf("h3: TimestepIndices[%d] = %d, want 0..%d", r, ti, len(in.Timesteps)-1)
		}
		if tag := in.TokenTags[r]; tag < 0 || tag >= Modalities {
			return nil, fmt.Errorf("h3: TokenTags[%d] = %d, want 0 (video), 1 (text) or 2 (audio)", r, tag)
		}
	}
	lay.perm = make([]int32, l)
	seen := make([]bool, l)
	offset := 0
	for _, group := range []struct {
		name string
		idx  []int32
	}{{"TextIndices", in.TextIndices}, {"VideoIndices", in.VideoIndices}, {"AudioIndices", in.AudioIndices}} {
		for j, r := range group.idx {
			if r < 0 || int(r) >= l {
				return nil, fmt.Errorf("h3: %s[%d] = %d is outside [0, %d)", group.name, j, r, l)
			}
			if seen[r] {
				return nil, fmt.Errorf("h3: packed row %d is listed twice (%s[%d]); the index lists must partition [0, %d)", r, group.name, j, l)
			}
			seen[r] = true
			lay.perm[r] = int32(offset + j)
		}
		offset += len(group.idx)
	}
	return lay, nil
}

// Forward runs the transformer on one packed document.
func (m *Model) Forward(in ForwardInputs) (out ForwardOutputs, err error) {
	defer graphexec.Recover(&err, "h3: forward")
	if m.p == nil {
		return out, fmt.Errorf("h3: model is closed")
	}
	lay, err := m.checkInputs(&in)
	if err != nil {
		return out, err
	}
	vsa, err := planVSA(in.VSA, in.TokenTags, m.cfg.NumLayers)
	if err != nil {
		return out, err
	}
	ada, err := m.stepAdaLN(&in, lay)
	if err != nil {
		return out, err
	}
	defer ada.close()
	text := in.TextState
	if text == nil {
		t, err := m.PrepareText(in.Text)
		if err != nil {
			return out, err
		}
		defer t.Close()
		text = t
	}
	cos, sin, err := m.ropeFor(in.PositionIDs)
	if err != nil {
		return out, err
	}
	m.traceLayout(&in, lay)
	x, err := m.packInput(&in, lay, text)
	if err != nil {
		return out, err
	}
	f := &blockForward{args: blockInputs[*tensors.Tensor]{RowIdx: ada.rowIdx, Cos: cos, Sin: sin},
		tables: ada.cache.tables, vsa: vsa, trace: m.trace}
	if x, err = m.blocks.run(x, f); err != nil {
		return out, err
	}
	return m.project(x, &in, lay, ada)
}

// stepAdaLN is one step's AdaLN: the tables (the caller's cache, the checkpoint's, or computed now
// for this step's timesteps) and each packed row's table rows.
type stepAdaLN struct {
	cache  *AdaLNCache
	owned  bool            // cache was computed for this step and is freed with it
	tIdx   []int32         // packed row -> timestep row of the cache (norm_out table)
	rowIdx *tensors.Tensor // packed row -> modulation row (timestep·Modalities + tag), on the device
}

func (a *stepAdaLN) close() {
	graphexec.Finalize(a.rowIdx)
	if a.owned {
		a.cache.Close()
	}
}

func (m *Model) stepAdaLN(in *ForwardInputs, lay *rowLayout) (*stepAdaLN, error) {
	a := &stepAdaLN{cache: in.AdaLN}
	if a.cache == nil {
		a.cache = m.ckCache
	}
	var pos []int
	if a.cache == nil {
		c, err := m.buildAdaLN(in.Timesteps)
		if err != nil {
			return nil, err
		}
		a.cache, a.owned = c, true
		pos = make([]int, len(in.Timesteps))
		for i := range pos {
			pos[i] = i
		}
	} else {
		var err error
		if pos, err = a.cache.positions(in.Timesteps); err != nil {
			return nil, err
		}
	}
	rowIdx := make([]int32, lay.l)
	a.tIdx = make([]int32, lay.l)
	for r := range rowIdx {
		a.tIdx[r] = int32(pos[in.TimestepIndices[r]])
		rowIdx[r] = a.tIdx[r]*Modalities + in.TokenTags[r]
	}
	// One device copy of the row indices serves every block.
	a.rowIdx = tensors.FromFlatDataAndDimensions(rowIdx, lay.l)
	if err := graphexec.Upload(m.backend, a.rowIdx); err != nil {
		a.rowIdx = nil
		a.close()
		return nil, fmt.Errorf("h3: row indices: %w", err)
	}
	return a, nil
}

// traceLayout hands the tests the per-row AdaLN indices and the RoPE tables.
func (m *Model) traceLayout(in *ForwardInputs, lay *rowLayout) {
	if m.trace == nil {
		return
	}
	idx := make([]float32, lay.l)
	for r := range idx {
		idx[r] = float32(in.TimestepIndices[r]*Modalities + in.TokenTags[r])
	}
	m.trace("adaln_indices", []int{lay.l}, idx)
	rot := m.cfg.RotaryDim()
	cosH, sinH := RopeTables(in.PositionIDs, m.cfg.RopeFreqDim, m.cfg.RopeTheta)
	m.trace("rope_cos", []int{lay.l, rot}, cosH)
	m.trace("rope_sin", []int{lay.l, rot}, sinH)
}

// packInput embeds the video and audio rows and packs them with the text rows in sequence order.
func (m *Model) packInput(in *ForwardInputs, lay *rowLayout, text *TextState) (*tensors.Tensor, error) {
	p := m.p
	args := inputInputs[*tensors.Tensor]{
		Video:   tensors.FromFlatDataAndDimensions(in.VideoRows, lay.nv, m.cfg.VideoPatchDim()),
		Audio:   tensors.FromFlatDataAndDimensions(in.AudioRows, lay.na, m.cfg.AudioInChannels),
		Text:    text.Tensor(),
		Perm:    tensors.FromFlatDataAndDimensions(lay.perm, lay.l),
		ProjInW: p.ProjIn.W.T, ProjInB: p.ProjIn.B.T, AudioInW: p.AudioProjIn.W.T, AudioInB: p.AudioProjIn.B.T,
	}
	res, err := graphexec.Call(m.execs().input, graphexec.Pack(&args)...)
	if err != nil {
		return nil, err
	}
	if m.trace != nil {
		defer graphexec.Finalize(res[1:]...)
		for i, name := range []string{"packed_input", "video_proj_in", "audio_proj_in"} {
			if err := m.emit(name, res[i]); err != nil {
				graphexec.Finalize(res[0])
				return nil, err
			}
		}
	}
	return res[0], nil
}

// project runs norm_out and the output projections on x (consumed) and reads the velocities back.
func (m *Model) project(x *tensors.Tensor, in *ForwardInputs, lay *rowLayout, ada *stepAdaLN) (out ForwardOutputs, err error) {
	p := m.p
	args := outputInputs[*tensors.Tensor]{
		X: x, NormOut: ada.cache.normOut, TIdx: tensors.FromFlatDataAndDimensions(ada.tIdx, lay.l), Norm: p.NormOutNorm.T,
		VideoIdx: tensors.FromFlatDataAndDimensions(in.VideoIndices, lay.nv),
		AudioIdx: tensors.FromFlatDataAndDimensions(in.AudioIndices, lay.na),
		ProjOutW: p.ProjOut.W.T, ProjOutB: p.ProjOut.B.T, AudioOutW: p.AudioProjOut.W.T, AudioOutB: p.AudioProjOut.B.T,
	}
	res, err := graphexec.Call(m.execs().output, graphexec.Pack(&args)...)
	graphexec.Finalize(x)
	if err != nil {
		return out, err
	}
	defer graphexec.Finalize(res...)
	if m.trace != nil {
		if err := m.emit("norm_out", res[2]); err != nil {
			return out, err
		}
	}
	// Taken, not copied: the velocities cross once (through page-locked staging in the GPU build) while
	// the host waits to step the latents.
	if out.Video, err = graphexec.TakeF32(res[0]); err != nil {
		return out, err
	}
	if out.Audio, err = graphexec.TakeF32(res[1]); err != nil {
		return out, err
	}
	return out, nil
}
