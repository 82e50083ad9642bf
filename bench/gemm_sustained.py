# Do FastH3's GEMMs run slower in the DiT forward than alone because of the card, or because of the forward?
# Alone, 20 calls each, XLA's dot runs the block's projections at 790-820 TFLOP/s (bench/mosaic_gemm_probe.py,
# BENCHMARKS.md session 35); inside the VSA forward the same cuBLAS kernels run at ~740 (session 32's trace),
# about 90 ms a forward. This times the forward's GEMMs and nothing else, as the forward issues them (50 blocks of
# four 5,376 -> 7,168 projections, the 7,168 -> 5,376 output one, the FFN's 5,376 -> 28,672 input and
# 14,336 -> 5,376 output, bf16, the DiT's 14,937 rows), forward after forward, in four forms taken in turn:
# nn.Linear's (x times the checkpoint's [out, in] weight transposed, plus the bias), the same without the bias (the
# form FastH3's forward runs: dit/h3/graph.go passes its block linears no bias), and x times an [in, out] weight
# with and without the bias (the probe's form). A card that slows under
# sustained load shows it here too; run it beside `nvidia-smi --query-gpu=clocks.sm,power.draw ... -lms 100` to
# see the clocks (session 37, one H100: the forwards ran at the 700 W cap, ~1,335 MHz, 690-708 TFLOP/s, where
# 20-call bursts ran near 1,965 MHz at 730-805; x . W[in, out] without bias 2 % faster than nn.Linear's form with
# the bias, before the bias and the layout were told apart: graph_nobias against probe is the layout alone).
#
#   python3 bench/gemm_sustained.py [--rows 14937] [--forwards 4] [--blocks 50] [--forms graph,...]
import argparse, os, sys, time

import numpy as np
import jax, jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "internal", "xlaext", "testdata"))
from gen_triton import timed  # noqa: E402

SHAPES = [("q", 5376, 7168), ("k", 5376, 7168), ("v", 5376, 7168), ("gate", 5376, 7168), ("out", 7168, 5376),
          ("ffn_in", 5376, 28672), ("ffn_out", 14336, 5376)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=14937)
    ap.add_argument("--forwards", type=int, default=4, help="forwards of each form")
    ap.add_argument("--blocks", type=int, default=50)
    ap.add_argument("--forms", default="graph,graph_nobias,io_bias,probe",
                    help="graph: x . W[out,in]^T + b (nn.Linear); graph_nobias: the same without b (FastH3's forward); io_bias: x . W[in,out] + b; probe: x . W[in,out]")
    a = ap.parse_args()
    key = jax.random.PRNGKey(0)
    bf = jnp.bfloat16
    ins, w_io, w_oi, bias = {}, {}, {}, {}
    for i, (name, k, n) in enumerate(SHAPES):
        if k not in ins:
            ins[k] = jax.random.normal(jax.random.fold_in(key, 100 + k), (a.rows, k), jnp.float32).astype(bf)
        w = jax.random.normal(jax.random.fold_in(key, i), (n, k), jnp.float32) / np.sqrt(k)
        w_oi[name], w_io[name] = w.astype(bf), w.T.astype(bf)
        bias[name] = (0.05 * jax.random.normal(jax.random.fold_in(key, 200 + i), (n,), jnp.float32)).astype(bf)
    out_in = lambda x, w: jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))
    graph_form, graph_nobias = jax.jit(lambda x, w, b: out_in(x, w) + b), jax.jit(out_in)
    io_bias, probe_form = jax.jit(lambda x, w, b: x @ w + b), jax.jit(lambda x, w: x @ w)
    all_forms = {"graph": lambda name, k: graph_form(ins[k], w_oi[name], bias[name]),
                 "graph_nobias": lambda name, k: graph_nobias(ins[k], w_oi[name]),
                 "io_bias": lambda name, k: io_bias(ins[k], w_io[name], bias[name]),
                 "probe": lambda name, k: probe_form(ins[k], w_io[name])}
    unknown = [f for f in a.forms.split(",") if f not in all_forms]
    if unknown:
        ap.error(f"--forms: unknown {unknown}; choose from {sorted(all_forms)}")
    forms = {f: all_forms[f] for f in a.forms.split(",")}
    flop = {name: 2.0 * a.rows * k * n for name, k, n in SHAPES}
    block_flop = sum(flop.values())

    # Each GEMM alone first (the probe's way: one warm-up, then 20 calls).
    for form, run in forms.items():
        for name, k, n in SHAPES:
            ms = timed(lambda: run(name, k), 20) * 1e3
            print(f"alone {form} {name:8s} {a.rows}x{k}->{n}: {ms:.3f} ms ({flop[name] / ms / 1e9:.0f} TFLOP/s)", flush=True)

    # Then the forward's GEMM sequence, forward after forward, the forms in turn.
    for f in range(a.forwards):
        for form, run in forms.items():
            t0 = time.perf_counter()
            for _ in range(a.blocks):
                for name, k, n in SHAPES:
                    r = run(name, k)
            r.block_until_ready()
            s = time.perf_counter() - t0
            print(f"forward {f} {form}: {s * 1e3:.1f} ms of GEMMs ({block_flop * a.blocks / s / 1e12:.0f} TFLOP/s, "
                  f"{s / a.blocks * 1e3:.2f} ms a block) at {time.time():.3f}", flush=True)


if __name__ == "__main__":
    main()
