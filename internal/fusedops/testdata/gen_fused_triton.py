# The FastH3 joint block's elementwise passes as Triton kernels that a Go graph calls (XLA's
# `__gpu$xla.gpu.triton` custom call, internal/xlaext.TritonCall), each checked against the same math
# written as the Go graph writes it (jnp here, lowered by the same XLA), and timed against it.
#
# Why: in a kernel trace of FastH3's forward (bench/vsa_row.sh's trace_h3.csv, BENCHMARKS.md) a block spends
# about 1.75 ms in XLA's fusions beside 17 ms of GEMMs. Three groups of them read the block's activations
# more often than the math needs:
#   - the q and k norm-and-rotation pass (dit/h3/graph.go qkNormRope): a reduction over each head for the
#     RMS statistic, then a concatenate fusion that writes the rotated heads at under half the card's
#     bandwidth (0.29 ms for each of q and k on an H200);
#   - the attention's and the FFN's pre-norm (dit/h3/graph.go jointAttention, jointFeedForward): the gated
#     residual add, the RMSNorm's reduction and the modulation are three fusions, each of which reads the
#     residual stream again (0.34-0.47 ms a pre-norm).
# One pass each reads what it needs once: upstream's FastH3 fuses the same three groups into Triton kernels
# (fastvideo/tests/transformers/test_minimax_h3_{modulation,qknorm_rope}_fusion.py name them).
#
# The kernels round where the graph rounds (each bf16 op of the graph is a product or sum rounded to bf16),
# so they differ from the graph only in the order of the float32 sums of the statistics. They read the
# geometry from an int32 operand, so one IR serves every sequence length.
#
#   qk_norm_rope   x bf16[N·128] (the q or k projection, row r = token r/H, head r%H), w bf16[128],
#                  cos, sin f32[L·rot] (the token's rotation, rot channels), eps f32[1],
#                  params int32[3] (N rows, heads H, rot) -> bf16[N·128]:
#                  RMSNorm of each row times w, its first rot channels rotated half-split (NeoX) by the
#                  token's angles, as dit/h3/graph.go qkNormRope (the statistic of x, applied last).
#                  Grid (L, 1, 1): one program a token, its H <= 64 heads.
#   norm_modulate  x bf16[L·D], table bf16[R·6·D] (the block's six modulation tables of each table row),
#   residual_norm_modulate  rows int32[L] (each token's table row), w bf16[D], eps f32[1],
#                  params int32[5] (D, gate table, shift table, scale table, L), and for the residual form
#                  y bf16[L·D] (the branch output): x' = x + table[gate]·y (the residual form only), then
#                  h = RMSNorm(x')·w·(1 + table[scale]) + table[shift]; results h (and x') bf16[L·D], as
#                  dit/h3/graph.go jointAttention / jointFeedForward with nn.RMSNorm and nn.Modulate.
#                  Grid (L, 1, 1): one program a token, its D channels in one block of WIDTH, D a
#                  multiple of VEC.
#
#   python3 internal/fusedops/testdata/gen_fused_triton.py [--bench [--hlo DIR]] [--out DIR]
#
# Run it on the GPU machine, whose JAX has the CUDA plugin the Go binaries load (the IR is bytecode for the
# Triton inside that plugin's XLA). Writes DIR/fused_triton.json (default: internal/fusedops/, which embeds
# it) with the kernels Go calls (KEEP) and, with --bench, times each kernel against the graph's form at
# FastH3's geometry (the row kernels' record then takes the sweep's fastest launch, TUNED) and (--hlo) writes
# the optimized HLO XLA makes of each graph form (graph_*.hlo.txt). It lowers each kernel at two geometries: one IR must serve every sequence length. The bytes differ (Pallas writes each whole-array
# operand's block offset as 0 times the array's size), so it compares the modules' text and refuses to
# write the file when anything else differs.
import argparse, base64, json, os, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gen_triton import lowered_triton_call, pallas_triton, plugin_version, timed  # noqa: E402

# The Triton module of each lowering as text, to show where two geometries' IRs differ.
LOWERED = []
try:
    import jax._src.pallas.triton.pallas_call_registration as _registration
    _lower = _registration.lowering.lower_jaxpr_to_triton_module

    def _capture(*args, **kwargs):
        result = _lower(*args, **kwargs)
        LOWERED.append(str(result.module))
        return result
    _registration.lowering.lower_jaxpr_to_triton_module = _capture
except (ImportError, AttributeError) as e:
    print("cannot capture the Triton modules as text:", e)

KEEP = ("qk_norm_rope", "norm_modulate", "residual_norm_modulate")  # the kernels internal/fusedops calls
TUNED = ("norm_modulate", "residual_norm_modulate")  # --bench records the sweep's fastest launch of these
HEAD = 128      # head width of qk_norm_rope's rows
HEADS = 64      # the most heads a token of qk_norm_rope's
WIDTH = 8192    # the widest row (model width D) the norm kernels take in one block
VEC = 16        # the norm kernels' runs of lanes: D must be a multiple (16-byte loads)
f32, bf16 = jnp.float32, jnp.bfloat16


def rounded(x):
    # A value of the graph's bf16 ops: the float32 result rounded to bf16, kept in float32.
    return x.astype(bf16).astype(f32)


def qk_norm_rope_kernel(params_ref, x_ref, w_ref, cos_ref, sin_ref, eps_ref, o_ref):
    # One program a token: its heads' rows [H, 128] (H <= HEADS), the token's rotation read once.
    heads, half = params_ref[1], pl.multiple_of(params_ref[2] // 2, 8)
    rot = 2 * half
    token = pl.program_id(0)
    hs = jnp.arange(HEADS, dtype=jnp.int32)
    cols = jnp.arange(HEAD, dtype=jnp.int32)
    live = jnp.broadcast_to((hs < heads)[:, None], (HEADS, HEAD))
    at = (token * heads + hs)[:, None] * HEAD + cols[None, :]
    first = jnp.broadcast_to((cols < half)[None, :], (HEADS, HEAD))
    second = jnp.broadcast_to(((cols >= half) & (cols < rot))[None, :], (HEADS, HEAD))
    # Each channel's partner in the half-split rotation, read as two shifted rows: c + half for the first
    # half, c - half for the second (half a multiple of 8: 16-byte loads).
    x = plgpu.load(x_ref.at[at], mask=live, other=0.0).astype(f32)
    xp = jnp.where(first, plgpu.load(x_ref.at[at + half], mask=live & first, other=0.0),
                   plgpu.load(x_ref.at[at - half], mask=live & second, other=0.0)).astype(f32)
    w = w_ref[...].astype(f32)
    wp = jnp.where(cols < half, plgpu.load(w_ref.at[cols + half], mask=cols < half, other=0.0),
                   plgpu.load(w_ref.at[cols - half], mask=(cols >= half) & (cols < rot), other=0.0)).astype(f32)
    # cos and sin as the graph expands them: [L, 128], cos then 1, -sin on the first half, sin on the
    # second, 0 past rot (the sign of the rotation's first half in the table: -(x2·sin) = x2·(-sin) exactly).
    c = cos_ref[pl.ds(token * HEAD, HEAD)]
    s = sin_ref[pl.ds(token * HEAD, HEAD)]
    r = jax.lax.rsqrt(jnp.sum(x * x, axis=1) / HEAD + eps_ref[0])
    out = (x * w[None, :] * c[None, :] + (xp * wp[None, :]) * s[None, :]) * r[:, None]
    plgpu.store(o_ref.at[at], out.astype(o_ref.dtype), mask=live)


def norm_kernel(residual):
    # One program a token. Its row is read as [WIDTH/VEC, VEC] with a mask that depends on the first index
    # only, so Triton can prove each run of VEC lanes live or dead together and load it in 16-byte vectors.
    # Against a 1-D mask, cols < d with d an operand, it cannot prove that and loads lane by lane: session
    # 31's form, 0.45 ms where the residual pass moves 640 MB (0.25 ms now; BENCHMARKS.md, session 33).
    def kernel(params_ref, rows_ref, x_ref, *refs):
        if residual:
            y_ref, table_ref, w_ref, eps_ref, h_ref, xo_ref = refs
        else:
            table_ref, w_ref, eps_ref, h_ref = refs
        d, gate, shift, scale = params_ref[0], params_ref[1], params_ref[2], params_ref[3]
        token = pl.program_id(0)
        runs = jnp.arange(WIDTH // VEC, dtype=jnp.int32)
        cols = runs[:, None] * VEC + jnp.arange(VEC, dtype=jnp.int32)[None, :]
        live = jnp.broadcast_to((runs * VEC < d)[:, None], (WIDTH // VEC, VEC))
        # d a multiple of VEC (Go checks it): every run starts on a 16-byte boundary.
        at = pl.multiple_of(token * d, VEC) + cols
        table = rows_ref[token] * 6

        def table_row(i):
            return plgpu.load(table_ref.at[pl.multiple_of((table + i) * d, VEC) + cols], mask=live, other=0.0).astype(f32)
        x = plgpu.load(x_ref.at[at], mask=live, other=0.0).astype(f32)
        if residual:
            y = plgpu.load(y_ref.at[at], mask=live, other=0.0).astype(f32)
            x = rounded(x + rounded(table_row(gate) * y))
            plgpu.store(xo_ref.at[at], x.astype(xo_ref.dtype), mask=live)
        r = jax.lax.rsqrt(jnp.sum(x * x) / d.astype(f32) + eps_ref[0])
        w = plgpu.load(w_ref.at[cols], mask=live, other=0.0).astype(f32)
        normed = rounded(x * r * w)
        h = rounded(rounded(normed * rounded(1.0 + table_row(scale))) + table_row(shift))
        plgpu.store(h_ref.at[at], h.astype(h_ref.dtype), mask=live)
    return kernel


def qk_call(n, tokens, warps, stages):
    return pallas_triton(qk_norm_rope_kernel, warps, stages, grid=(tokens,),
                         out_shape=jax.ShapeDtypeStruct((n * HEAD,), bf16), name="qk_norm_rope")


def norm_call(residual, tokens, d, warps, stages):
    shape = jax.ShapeDtypeStruct((tokens * d,), bf16)
    return pallas_triton(norm_kernel(residual), warps, stages, grid=(tokens,),
                         out_shape=(shape, shape) if residual else shape,
                         name="residual_norm_modulate" if residual else "norm_modulate")


# The graph's forms (dit/h3/graph.go, internal/nn), in jnp: what XLA runs without the kernels.
def expanded_angles(cos, sin, rot):
    # The tables qk_norm_rope reads, [L·128] float32 each (see the kernel).
    l, half = cos.shape[0], rot // 2
    c = jnp.concatenate([cos, jnp.ones((l, HEAD - rot), f32)], -1)
    s = jnp.concatenate([-sin[:, :half], sin[:, half:], jnp.zeros((l, HEAD - rot), f32)], -1)
    return c.reshape(-1), s.reshape(-1)


def graph_qk(x, w, cos, sin, eps, heads, rot):
    l = cos.shape[0]
    x = x.reshape(l, heads, HEAD)
    xf = x.astype(f32)
    r = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    xw = xf * w.astype(f32)
    half = rot // 2
    c, s = cos[:, None, :], sin[:, None, :]
    x1, x2 = xw[..., :half], xw[..., half:rot]
    rotated = jnp.concatenate([-x2, x1], -1)
    out = jnp.concatenate([xw[..., :rot] * c + rotated * s, xw[..., rot:]], -1)
    return (out * r).astype(bf16).reshape(-1)


def graph_norm(x, y, table, rows, w, eps, gate, shift, scale, d):
    x = x.reshape(-1, d)
    m = table.reshape(-1, 6, d)[rows]
    if y is not None:
        x = x + m[:, gate] * y.reshape(-1, d)
    xf = x.astype(f32)
    normed = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps) * w.astype(f32)).astype(bf16)
    h = normed * (1 + m[:, scale]) + m[:, shift]
    return (h.reshape(-1), x.reshape(-1)) if y is not None else h.reshape(-1)


ZERO_OFFSET = (re.compile(r"%c(\d+)_i32(_\d+)? = arith\.constant \1 : i32"),
               re.compile(r"%\d+ = arith\.muli %c0_i32(_\d+)?, %c\d+_i32(_\d+)? : i32"))


def without_locations(text):
    # A module's text without debug locations, which name the caller's line.
    return re.sub(r"\s*loc\([^()]*(\([^()]*\)[^()]*)*\)", "", "\n".join(l for l in text.splitlines() if not l.startswith("#loc")))


def geometry_free(a, b):
    # Whether two lowerings of a kernel at different geometries compute the same thing: Pallas gives every
    # operand, a whole-array block, the offset block index 0 times the array's size, so those constants
    # (and the zero products) are all that may differ; any other difference makes the IR one geometry's.
    # Returns the verdict and the differing lines.
    a, b = a.splitlines(), b.splitlines()
    if len(a) != len(b):
        return False, [f"{len(a)} lines against {len(b)}"]
    lines = [f"- {x}\n+ {y}" for x, y in zip(a, b) if x != y]
    free = all(any(p.fullmatch(line.strip()) for p in ZERO_OFFSET) for x, y in zip(a, b) if x != y for line in (x, y))
    return free, lines


def inputs(rng, tokens, heads, d, rot, table_rows):
    b = lambda *shape, scale=1.0: jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale).astype(bf16)
    angles = rng.uniform(0, 2 * np.pi, (tokens, rot)).astype(np.float32)
    return dict(q=b(tokens * heads * HEAD), wq=b(HEAD, scale=0.2) + 1, cos=jnp.asarray(np.cos(angles)), sin=jnp.asarray(np.sin(angles)),
                x=b(tokens * d, scale=3.0), y=b(tokens * d), table=b(table_rows * 6 * d, scale=0.3), w=b(d, scale=0.2) + 1,
                rows=jnp.asarray(rng.integers(0, table_rows, tokens, dtype=np.int32)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, ".."))
    ap.add_argument("--hlo", help="with --bench, a folder for the optimized HLO of each graph form")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    eps = 1e-5
    epsv = jnp.asarray([eps], f32)
    gate, shift, scale = 2, 3, 4
    # The launch settings kept: the fastest of the --bench sweep on an H100 (BENCHMARKS.md): qk_norm_rope
    # 0.198 ms at 16 warps against 0.246 at 4 (session 31); the row kernels 0.130 and 0.252 ms at 8 warps
    # (session 33; 4 warps within 0.01 ms).
    settings = {"qk_norm_rope": (16, 1), "norm_modulate": (8, 1), "residual_norm_modulate": (8, 1)}

    hlo_dir = args.hlo if args.bench else None

    def check(tokens, heads, d, rot, table_rows, timing):
        a = inputs(rng, tokens, heads, d, rot, table_rows)
        n = tokens * heads
        qk_params = jnp.asarray([n, heads, rot], jnp.int32)
        norm_params = jnp.asarray([d, gate, shift, scale, tokens], jnp.int32)
        qk_graph = jax.jit(lambda q, w, c, s: graph_qk(q, w, c, s, eps, heads, rot))
        norm_graph = jax.jit(lambda x, t, r, w: graph_norm(x, None, t, r, w, eps, gate, shift, scale, d))
        res_graph = jax.jit(lambda x, y, t, r, w: graph_norm(x, y, t, r, w, eps, gate, shift, scale, d))
        graph_forms = {"qk_norm_rope": (qk_graph, (a["q"], a["wq"], a["cos"], a["sin"])),
                       "norm_modulate": (norm_graph, (a["x"], a["table"], a["rows"], a["w"])),
                       "residual_norm_modulate": (res_graph, (a["x"], a["y"], a["table"], a["rows"], a["w"]))}
        runs = {
            "qk_norm_rope": (lambda w, s: jax.jit(qk_call(n, tokens, w, s)), (qk_params, a["q"], a["wq"], *expanded_angles(a["cos"], a["sin"], rot), epsv),
                             lambda: qk_graph(a["q"], a["wq"], a["cos"], a["sin"])),
            "norm_modulate": (lambda w, s: jax.jit(norm_call(False, tokens, d, w, s)), (norm_params, a["rows"], a["x"], a["table"], a["w"], epsv),
                              lambda: norm_graph(a["x"], a["table"], a["rows"], a["w"])),
            "residual_norm_modulate": (lambda w, s: jax.jit(norm_call(True, tokens, d, w, s)),
                                       (norm_params, a["rows"], a["x"], a["y"], a["table"], a["w"], epsv),
                                       lambda: res_graph(a["x"], a["y"], a["table"], a["rows"], a["w"])),
        }
        irs = {}
        for name, (make, ops, graph) in runs.items():
            w, s = settings[name]
            f = make(w, s)
            got = f(*ops)
            want = graph()
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for i, (g, wnt) in enumerate(zip(got, want)):
                g, wnt = np.asarray(g, np.float32), np.asarray(wnt, np.float32)
                err = float(np.abs(g - wnt).max())
                ulp = float((np.abs(g - wnt) / np.maximum(np.abs(wnt), 1e-30)).max())
                print(f"{name} output {i} at {tokens} tokens: max |kernel - graph| {err:.4g} (largest relative {ulp:.3g}, "
                      f"max |graph| {np.abs(wnt).max():.3g}, equal {np.mean(g == wnt) * 100:.2f} %)", flush=True)
            cfg, _, _ = lowered_triton_call(f.lower(*ops).as_text(), len(ops), name)
            irs[name] = (cfg["ir"], LOWERED[-1] if LOWERED else "")
            if timing:
                sweep = {}
                for w2, s2 in [(4, 1), (8, 1), (16, 1), (32, 1), (4, 2)]:
                    f2 = make(w2, s2)
                    sweep[(w2, s2)] = timed(lambda: f2(*ops), 20)
                    print(f"  {name} {w2} warps {s2} stages: {sweep[(w2, s2)] * 1e3:.3f} ms", flush=True)
                if name in TUNED:
                    # The record takes the sweep's fastest launch. The IR must not depend on it (Pallas writes
                    # the warps into the call's config, not the module): lowered again, the text must match.
                    settings[name] = min(sweep, key=sweep.get)
                    lowered_triton_call(make(*settings[name]).lower(*ops).as_text(), len(ops), name)
                    if LOWERED and without_locations(LOWERED[-1]) != without_locations(irs[name][1]):
                        sys.exit(f"not written: {name}'s IR depends on its launch settings")
                    print(f"  {name} keeps {settings[name][0]} warps {settings[name][1]} stages", flush=True)
                print(f"  {name} graph's form (XLA): {timed(graph, 20) * 1e3:.3f} ms", flush=True)
                if hlo_dir:  # the fusions XLA makes of the graph's form
                    graph_jit, graph_args = graph_forms[name]
                    with open(os.path.join(hlo_dir, f"graph_{name}.hlo.txt"), "w") as fh:
                        fh.write(graph_jit.lower(*graph_args).compile().as_text())
        return irs

    # Both geometries lowered from one line: the IR's debug locations include the caller's line.
    small, large = (check(*geometry, timing) for geometry, timing in (((300, 3, 640, 96, 3), False), ((14937, 56, 5376, 96, 3), args.bench)))
    record = {"generator": "internal/fusedops/testdata/gen_fused_triton.py", "jax": jax.__version__, "plugin": plugin_version(),
              "device": str(jax.devices()[0].device_kind), "head": HEAD, "heads": HEADS, "width": WIDTH, "vec": VEC, "kernels": {}}
    differ = []
    for name, (ir, text) in large.items():
        free, lines = geometry_free(small[name][1], text)
        if not free:
            differ += [name] if name in KEEP else []
            print(name, "IR depends on the geometry; the modules' text differs in:")
            print("\n".join(lines[:40]))
        same = ir == small[name][0]
        if name not in KEEP:
            continue
        w, s = settings[name]
        record["kernels"][name] = {"num_warps": w, "num_stages": s, "ir": base64.b64encode(ir).decode(),
                                   "same_ir_at_two_geometries": same, "geometry_free": free}
        print(name, "same IR at two geometries:", same, "; geometry-free:", free)
    if differ:
        sys.exit(f"not written: the IR of {differ} depends on the geometry")
    if not LOWERED:
        sys.exit("not written: the modules' text was not captured, so nothing says the IR serves every geometry")
    with open(os.path.join(args.out, "fused_triton.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    print("wrote", os.path.join(args.out, "fused_triton.json"))


if __name__ == "__main__":
    main()
