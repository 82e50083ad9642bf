package h3

import (
	"errors"
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"

	"fastvideo/internal/graphexec"
	"fastvideo/internal/hostmath"
	"fastvideo/internal/safetensors"
	"fastvideo/internal/weights"
)

// AdaLN step cache (FastVideo's MLX runtime, fastvideo/mlx_runtime/minimax_h3.py). The modulation tables depend only on (timestep, modality), so for the
// ladder a run visits they are computed once per generation (PrepareAdaLN) instead of once per step and
// block; a converted checkpoint may carry them and drop the 13B projection weights, at the price of
// serving only the ladder it was exported for.

// PrepareAdaLN computes the modulation tables of every block for the timesteps a run visits (pass the
// video and audio ladders; 1.0 is added). Pass the result in ForwardInputs.AdaLN for every step.
func (m *Model) PrepareAdaLN(ladders ...[]float32) (*AdaLNCache, error) {
	if m.p == nil {
		return nil, fmt.Errorf("h3: model is closed")
	}
	if m.ckCache != nil {
		return nil, fmt.Errorf("h3: this model keeps a fixed AdaLN cache for %v and no AdaLN projections; "+
			"forwards use it directly (PrepareAdaLN needs the full checkpoint)", m.ckCache.Timesteps)
	}
	for _, l := range ladders {
		for i, t := range l {
			if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
				return nil, fmt.Errorf("h3: PrepareAdaLN ladder value %d = %v is not finite", i, t)
			}
		}
	}
	return m.buildAdaLN(CacheTimesteps(ladders...))
}

// KeepAdaLNCache makes cache the model's fixed AdaLN tables and frees the AdaLN projection weights
// (13.0B parameters at release size): afterwards forwards without ForwardInputs.AdaLN use cache, and
// timesteps outside it are errors. The model takes ownership of cache (Close frees it).
func (m *Model) KeepAdaLNCache(cache *AdaLNCache) error {
	if m.p == nil {
		return fmt.Errorf("h3: model is closed")
	}
	if cache == nil || cache.normOut == nil {
		return fmt.Errorf("h3: KeepAdaLNCache needs a live cache from PrepareAdaLN")
	}
	if len(cache.tables) != len(m.p.Blocks) {
		return fmt.Errorf("h3: the AdaLN cache has %d block tables, the model %d blocks", len(cache.tables), len(m.p.Blocks))
	}
	if m.ckCache != nil && m.ckCache != cache {
		m.ckCache.Close()
	}
	m.ckCache = cache
	for b := range m.p.Blocks {
		releaseParams(m.p.Blocks[b].AdaLN.W, m.p.Blocks[b].AdaLN.B)
	}
	releaseParams(m.p.NormOut.W, m.p.NormOut.B, m.p.AdaLNBasis)
	m.adalnDropped = true
	return nil
}

// buildAdaLN runs the time MLP and every AdaLN projection for the timesteps ts; table rows follow the
// order of ts.
func (m *Model) buildAdaLN(ts []float32) (c *AdaLNCache, err error) {
	defer graphexec.Recover(&err, "h3: AdaLN tables")
	ts = append([]float32(nil), ts...)
	if m.p.Cache != nil || m.adalnDropped {
		return nil, errors.New("h3: the AdaLN projection weights are not loaded (the model keeps a fixed AdaLN cache)")
	}
	ex := m.execs()
	p := m.p
	nT := len(ts)
	proj := hostmath.TimestepSinusoid(ts, m.cfg.FreqDim)
	if m.trace != nil {
		m.trace("time_proj", []int{nT, m.cfg.FreqDim}, proj)
	}
	args := timeInputs[*tensors.Tensor]{
		Proj: tensors.FromFlatDataAndDimensions(proj, nT, m.cfg.FreqDim),
		W1:   p.Time1.W.T, B1: p.Time1.B.T, W2: p.Time2.W.T, B2: p.Time2.B.T,
	}
	var basis []*tensors.Tensor
	if p.AdaLNBasis != nil {
		basis = append(basis, p.AdaLNBasis.T)
	}
	res, err := graphexec.Call(ex.time, graphexec.Pack(&args, basis...)...)
	if err != nil {
		return nil, err
	}
	cond := res[0]
	defer graphexec.Finalize(cond)
	if m.trace != nil {
		if err := m.emit("temb", res[1]); err != nil {
			return nil, err
		}
		if p.AdaLNBasis != nil {
			if err := m.emit("temb_adaln_basis", cond); err != nil {
				return nil, err
			}
		}
		graphexec.Finalize(res[1])
	}
	c = &AdaLNCache{Timesteps: ts}
	for b := range p.Blocks {
		r, err := graphexec.Call(ex.adaln, cond, p.Blocks[b].AdaLN.W.T, p.Blocks[b].AdaLN.B.T)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.tables = append(c.tables, r[0])
		if b == 0 {
			if err := m.emit("block0_adaln_tables", r[0]); err != nil {
				c.Close()
				return nil, err
			}
		}
	}
	r, err := graphexec.Call(ex.normOut, cond, p.NormOut.W.T, p.NormOut.B.T)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.normOut = r[0]
	return c, nil
}

// cacheFromCheckpoint stacks the checkpoint's cache tensors into the layout the block executable takes.
func (m *Model) cacheFromCheckpoint() (c *AdaLNCache, err error) {
	defer graphexec.Recover(&err, "h3: AdaLN cache from the checkpoint")
	pc := m.p.Cache
	stack := graphexec.MustExec(m.backend, "h3.stack_tables", func(in []*Node) []*Node { return []*Node{Stack(in, 1)} })
	defer stack.Finalize()
	c = &AdaLNCache{Timesteps: pc.TimestepsUsed}
	for b := range pc.Tables {
		args := make([]any, 6)
		for k := range args {
			args[k] = pc.Tables[b][k].T
		}
		r, err := graphexec.Call(stack, args...)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.tables = append(c.tables, r[0])
		for k := range pc.Tables[b] {
			pc.Tables[b][k].T.FinalizeAll()
			pc.Tables[b][k].T = nil
		}
	}
	r, err := graphexec.Call(stack, pc.NormOutShift.T, pc.NormOutScale.T)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.normOut = r[0]
	return c, nil
}

// ExportAdaLNCache returns the checkpoint tensors (names CacheTableName, CacheNormOutShift/Scale, in the
// compute dtype) and the manifest of a cache, for a converter that writes a checkpoint without the AdaLN
// projections. steps records the ladder length for the error a mismatching run gets.
func (m *Model) ExportAdaLNCache(c *AdaLNCache, steps int) (out []safetensors.Tensor, man AdaLNManifest, err error) {
	defer graphexec.Recover(&err, "h3: exporting the AdaLN cache")
	if c == nil || c.normOut == nil {
		return nil, man, fmt.Errorf("h3: no AdaLN cache to export")
	}
	d := m.cfg.HiddenSize
	n := len(c.Timesteps)
	st, err := stDType(m.dtype)
	if err != nil {
		return nil, man, err
	}
	for b, t := range c.tables {
		v, err := graphexec.HostF32(t) // [n·3, 6, D]
		if err != nil {
			return nil, man, err
		}
		for k := 0; k < 6; k++ {
			vals := make([]float64, n*Modalities*d)
			for r := 0; r < n*Modalities; r++ {
				for j := 0; j < d; j++ {
					vals[r*d+j] = float64(v[(r*6+k)*d+j])
				}
			}
			out = append(out, safetensors.Tensor{Name: CacheTableName(b, k), DType: st, Shape: []int{n * Modalities, d},
				Data: weights.EncodeFloats(vals, m.dtype)})
		}
	}
	v, err := graphexec.HostF32(c.normOut) // [n, 2, D]
	if err != nil {
		return nil, man, err
	}
	for k, name := range []string{CacheNormOutShift, CacheNormOutScale} {
		vals := make([]float64, n*d)
		for r := 0; r < n; r++ {
			for j := 0; j < d; j++ {
				vals[r*d+j] = float64(v[(r*2+k)*d+j])
			}
		}
		out = append(out, safetensors.Tensor{Name: name, DType: st, Shape: []int{n, d}, Data: weights.EncodeFloats(vals, m.dtype)})
	}
	man = AdaLNManifest{Timesteps: append([]float32(nil), c.Timesteps...), NumBlocks: m.cfg.NumLayers, TablesPerBlock: 6, Steps: steps}
	return out, man, nil
}

func stDType(dt dtypes.DType) (safetensors.DType, error) {
	switch dt {
	case dtypes.Float32:
		return safetensors.F32, nil
	case dtypes.BFloat16:
		return safetensors.BF16, nil
	case dtypes.Float16:
		return safetensors.F16, nil
	}
	return "", fmt.Errorf("h3: no safetensors dtype for %s", dt)
}
