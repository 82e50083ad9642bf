package schedule

import (
	"fmt"
	"math"

	"fastvideo/internal/hostmath"
)

// UniPC is FlowUniPCMultistepScheduler as FastVideo runs it for every base
// Wan model: solver order 2, bh2, predict_x0, lower_order_final, no disabled
// corrector steps, final sigma 0, flow-prediction model outputs (v = noise -
// x0, so x0 = x - sigma*v). It is stateful: call Step once per timestep, in
// order, with the model output at the current sample.
//
// The ladder is computed in float64 (NumPy) and stored as float32; the
// update is float32 arithmetic with scalars (sigmas, log-SNRs, solver
// coefficients) computed as float32 0-d tensors exactly in the reference's
// operation order.
type UniPC struct {
	Shift     float64
	Sigmas    []float32 // Steps()+1 values; the last is 0
	Timesteps []int64   // fed to the DiT: trunc(1000*sigma) from the float64 ladder

	step           int
	modelOutputs   [2][]float32 // x0 predictions of the previous and current step
	lastSample     []float32
	lowerOrderNums int
	thisOrder      int
}

// NewUniPC is set_timesteps(steps) with the given flow shift: the training
// table's sigma_max = shift(0.999) in float32 (sigma_min = 0), then
// sigma_k = shift(linspace(sigma_max, 0, steps+1)[k]) in float64 for k < steps
// (shifted a second time), t_k = trunc(1000*sigma_k), and a final sigma of 0.
func NewUniPC(shift float64, steps int) (*UniPC, error) {
	if !(shift > 0) || math.IsInf(shift, 0) {
		return nil, fmt.Errorf("schedule: shift must be positive and finite, got %g", shift)
	}
	if steps < 1 {
		return nil, fmt.Errorf("schedule: steps must be >= 1, got %d", steps)
	}
	// Training table: alphas = linspace(1, 1/1000, 1000) reversed, sigma = 1 -
	// alpha in float64, then float32 and shifted in float32; only its ends
	// matter here (sigma_max at alpha = 1/1000, sigma_min = 0).
	alphaMin := 1.0 / WanTrainTimesteps // linspace's endpoint is exactly stop
	sigmaMax := float64(shiftF32(shift, float32(1-alphaMin)))
	sigmaMin := float64(shiftF32(shift, 0))
	base := hostmath.Linspace(sigmaMax, sigmaMin, steps+1)[:steps]
	u := &UniPC{Shift: shift, Sigmas: make([]float32, steps+1), Timesteps: make([]int64, steps)}
	for k, b := range base {
		s := shiftF64(shift, b)
		u.Sigmas[k] = float32(s)
		u.Timesteps[k] = int64(float64(s * WanTrainTimesteps)) // torch .to(int64) truncates toward zero
	}
	if steps > 1 && u.Timesteps[0] == u.Timesteps[1] {
		// The reference looks the first timestep up by value and, finding it
		// twice, would start at index 1 and run out of sigmas at the end.
		return nil, fmt.Errorf("schedule: UniPC with shift %g and %d steps repeats timestep %d; use fewer steps", shift, steps, u.Timesteps[0])
	}
	return u, nil
}

// Steps is the number of DiT forwards.
func (u *UniPC) Steps() int { return len(u.Timesteps) }

// StepIndex is the index of the next Step.
func (u *UniPC) StepIndex() int { return u.step }

// Reset forgets the solver history so that the ladder can be run again.
func (u *UniPC) Reset() {
	u.step, u.lastSample, u.lowerOrderNums, u.thisOrder = 0, nil, 0, 0
	u.modelOutputs = [2][]float32{}
}

// Step advances one timestep: modelOutput is the DiT's flow prediction at
// sample (the current latent, Timesteps[StepIndex()]); it returns the next
// latent in a new slice (the inputs are not modified and may be reused).
func (u *UniPC) Step(modelOutput, sample []float32) ([]float32, error) {
	k := u.step
	if k >= u.Steps() {
		return nil, fmt.Errorf("schedule: UniPC already ran all %d steps (call Reset to start again)", u.Steps())
	}
	if len(modelOutput) != len(sample) {
		return nil, fmt.Errorf("schedule: model output (%d) and sample (%d) lengths differ", len(modelOutput), len(sample))
	}
	if k > 0 && len(sample) != len(u.lastSample) {
		return nil, fmt.Errorf("schedule: sample length changed from %d to %d between steps", len(u.lastSample), len(sample))
	}
	// convert_model_output: x0 = x - sigma_k*v.
	sk := u.Sigmas[k]
	m := make([]float32, len(sample))
	for i, x := range sample {
		m[i] = x - float32(sk*modelOutput[i])
	}
	x := sample
	if k > 0 && u.lastSample != nil {
		x = u.correct(m, u.lastSample, u.thisOrder)
	}
	u.modelOutputs[0], u.modelOutputs[1] = u.modelOutputs[1], m

	order := min(2, u.Steps()-k) // lower_order_final
	u.thisOrder = min(order, u.lowerOrderNums+1)
	u.lastSample = x
	prev := u.predict(x, u.thisOrder)
	if u.lowerOrderNums < 2 {
		u.lowerOrderNums++
	}
	u.step++
	return prev, nil
}

// lambda is log(alpha) - log(sigma) of the flow parameterization
// (alpha = 1 - sigma), both clamped at 1e-12, in float32.
func lambda(sigma float32) float32 {
	const eps = float32(1e-12)
	alpha := 1 - sigma
	return logF32(max(alpha, eps)) - logF32(max(sigma, eps))
}

func logF32(x float32) float32   { return float32(math.Log(float64(x))) }
func expm1F32(x float32) float32 { return float32(math.Expm1(float64(x))) }

// bhStep holds what UniP and UniC both derive for a step from sigmaS0 to sigmaT (bh2 variant), each
// value rounded to float32 as the reference computes it.
type bhStep struct {
	lambdaS0, h, hh float32
	hPhi1, bH       float32 // both expm1(hh): bh2's B(h) equals h_phi_1, kept apart to mirror the reference
	ratio, c, cb    float32 // sigmaT/sigmaS0, alphaT·hPhi1, alphaT·B(h)
}

func newBHStep(sigmaT, sigmaS0 float32) bhStep {
	alphaT := 1 - sigmaT
	lambdaT, lambdaS0 := lambda(sigmaT), lambda(sigmaS0)
	h := lambdaT - lambdaS0
	hh := -h
	hPhi1 := expm1F32(hh)
	bH := expm1F32(hh)
	return bhStep{lambdaS0: lambdaS0, h: h, hh: hh, hPhi1: hPhi1, bH: bH,
		ratio: sigmaT / sigmaS0, c: alphaT * hPhi1, cb: alphaT * bH}
}

// firstDifference is D1 = (m_prev − m0)/r_k of the order-2 updates, with r_k = (λ(sigmaPrev) − λ_s0)/h
// for the sigma of the older model output.
func (u *UniPC) firstDifference(st bhStep, sigmaPrev float32) ([]float32, float32) {
	rk := (lambda(sigmaPrev) - st.lambdaS0) / st.h
	mi, m0 := u.modelOutputs[0], u.modelOutputs[1]
	d1 := make([]float32, len(m0))
	for i := range d1 {
		d1[i] = (mi[i] - m0[i]) / rk
	}
	return d1, rk
}

// predict is multistep_uni_p_bh_update (UniP, B(h) = expm1(-h)).
func (u *UniPC) predict(x []float32, order int) []float32 {
	k := u.step
	m0 := u.modelOutputs[1]
	st := newBHStep(u.Sigmas[k+1], u.Sigmas[k])
	ratio, c, cb := st.ratio, st.c, st.cb

	var d1 []float32
	if order == 2 {
		d1, _ = u.firstDifference(st, u.Sigmas[k-1])
	}
	const rhoP = float32(0.5) // the fixed order-2 predictor weight
	out := make([]float32, len(x))
	for i := range x {
		v := float32(ratio*x[i]) - float32(c*m0[i])
		if d1 != nil {
			v = v - float32(cb*float32(rhoP*d1[i]))
		}
		out[i] = v
	}
	return out
}

// correct is multistep_uni_c_bh_update (UniC) at the current step: it
// replaces the previous predictor's output by a corrected sample built from
// lastSample (the sample that predictor started from), the previous x0
// predictions and the fresh one, mT.
func (u *UniPC) correct(mT, lastSample []float32, order int) []float32 {
	k := u.step
	m0 := u.modelOutputs[1]
	st := newBHStep(u.Sigmas[k], u.Sigmas[k-1])
	hh, hPhi1, bH := st.hh, st.hPhi1, st.bH
	ratio, c, cb := st.ratio, st.c, st.cb

	var d1 []float32
	var rhos []float32
	if order == 1 {
		rhos = []float32{0.5}
	} else {
		var rk float32
		d1, rk = u.firstDifference(st, u.Sigmas[k-2])
		// b_i = h_phi_i * i! / B(h), h_phi_1 = expm1(hh)/hh - 1,
		// h_phi_{i+1} = h_phi_i/hh - 1/(i+1)!; solve [[1,1],[rk,1]] rho = b.
		hPhiK := hPhi1/hh - 1
		b1 := float32(hPhiK*1) / bH
		hPhiK = hPhiK/hh - 0.5
		b2 := float32(hPhiK*2) / bH
		r0, r1 := solve2x2F32(1, 1, rk, 1, b1, b2)
		rhos = []float32{r0, r1}
	}
	last := rhos[len(rhos)-1]
	out := make([]float32, len(mT))
	for i := range mT {
		xt := float32(ratio*lastSample[i]) - float32(c*m0[i])
		d1t := mT[i] - m0[i]
		corr := float32(last * d1t)
		if d1 != nil {
			corr = float32(rhos[0]*d1[i]) + corr
		}
		out[i] = xt - float32(cb*corr)
	}
	return out
}

// solve2x2F32 solves [[a11,a12],[a21,a22]] x = [b1,b2] in float32 the way
// torch.linalg.solve's LAPACK getrf/getrs kernels do on CPU: partial
// pivoting on the first column, the multiplier as a reciprocal product, a
// fused multiply-add in the forward substitution and reciprocal diagonals in
// the back substitution. (Chosen because it reproduces the 50-step shift-5
// fixture bit for bit, where plain divisions leave last-bit differences.)
func solve2x2F32(a11, a12, a21, a22, b1, b2 float32) (float32, float32) {
	if abs32(a21) > abs32(a11) {
		a11, a12, a21, a22 = a21, a22, a11, a12
		b1, b2 = b2, b1
	}
	l := a21 * (1 / a11)
	u22 := a22 - float32(l*a12)
	y2 := fmaF32(-l, b1, b2)
	x2 := y2 * (1 / u22)
	x1 := (b1 - float32(a12*x2)) * (1 / a11)
	return x1, x2
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }
