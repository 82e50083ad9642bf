# Can a Mosaic GPU GEMM (JAX's Pallas, backend="mosaic_gpu") match cuBLAS at FastH3's FFN input projection? The
# question behind the largest item left on issue 32's DiT line: SwiGLU's product is a separate pass over the
# FFN-in GEMM's output (0.41 ms a block on an H100, BENCHMARKS.md session 33), which a GEMM of our own could do
# in its epilogue (value and gate columns interleaved so that a tile holds both), writing half the output. That
# pays only if the GEMM itself runs as fast as the cuBLAS kernel XLA picks (~740 TFLOP/s there).
#
# It times JAX's own Hopper matmul, jax/experimental/pallas/ops/gpu/hopper_matmul_mgpu.py (matmul,
# imported unchanged from the JAX on the GPU machine: TMA, wgmma, two compute warpgroups and a memory one,
# a persistent grid), at a few of its tuning configs, against XLA's dot (cuBLAS) on the same bf16 inputs, and
# XLA's dot followed by SwiGLU's product (what the Go graph runs today) against swiglu_matmul below, the same
# main loop with the product in its epilogue:
#
#   python3 bench/mosaic_gemm_probe.py [--rows 14937] [--shapes ffn_in,proj,proj2,proj4,ffn_out]
#
# The kernels need whole tiles: rows are padded to a multiple of 256 (XLA's dot is timed at both sizes). Session
# 35's answer (BENCHMARKS.md): the epilogue kernel beats XLA's dot then product at the padded rows, but cuBLAS is
# faster at the DiT's own 14,937 rows, which leaves too little to pay for a kernel of our own.
import argparse, itertools, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp
import jax.experimental.pallas as pl

from gen_triton import timed  # noqa: E402

def swiglu_matmul(x, w, config):
    # SwiGLU's input projection with the product in the epilogue: x [M, K] times w [K, 2F] whose columns are
    # interleaved by tile_n (interleave_tiles), out [M, F] = value * silu(gate) computed on the float32
    # accumulator and rounded once. Everything but the epilogue is JAX 0.11.2's hopper_matmul_mgpu.kernel
    # (no cluster, no C operand): a persistent grid of one program an SM walking output tiles in a planar
    # snake, a memory warpgroup streaming A and B tiles by TMA for two compute warpgroups, each holding a
    # tile_m x tile_n accumulator. Each warpgroup's accumulator holds tile_n/2 value and the same gate columns.
    import functools
    from jax import lax
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    dtype = x.dtype
    (m, k), n = x.shape, w.shape[1]
    tile_m, tile_n, tile_k = config.tile_m, config.tile_n, config.tile_k
    half = tile_n // 2
    epi_m, epi_n = 64, min(64, half)
    wg_m = config.wg_dimension == hm.MatmulDimension.M
    cta_m, cta_n = tile_m * (1 + wg_m), tile_n * (1 + (not wg_m))
    if m % cta_m or n % cta_n or k % tile_k:
        raise ValueError(f"{x.shape} x {w.shape} does not tile by {cta_m} x {cta_n} x {tile_k}")
    m_iters, n_iters, k_iters = m // cta_m, n // cta_n, k // tile_k
    swizzle = plgpu.find_swizzle(tile_k * jnp.dtype(dtype).itemsize * 8)
    transforms = (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(swizzle))
    out_swizzle = plgpu.find_swizzle(epi_n * jnp.dtype(dtype).itemsize * 8)
    out_transforms = (plgpu.TilingTransform((8, out_swizzle // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(out_swizzle))

    def kernel(x_gmem, w_gmem, out_gmem):
        def pipeline(body, context):
            return plgpu.emit_pipeline_warp_specialized(
                body, grid=(k_iters,), memory_registers=40,
                in_specs=[plgpu.BlockSpec((cta_m, tile_k), lambda kk: (0, kk), transforms=transforms, memory_space=plgpu.SMEM),
                          plgpu.BlockSpec((tile_k, cta_n), lambda kk: (kk, 0), transforms=transforms, memory_space=plgpu.SMEM)],
                wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=config.max_concurrent_steps, compute_context=context)

        ignore = lambda *_, **__: None

        @functools.partial(pl.run_scoped, allocs=pipeline(ignore, ignore).get_allocations(x_gmem, w_gmem),
                           out_smem=plgpu.SMEM((2, 2, epi_m, epi_n), dtype, transforms=out_transforms), collective_axes="wg")
        def _(allocs, out_smem):
            wg = lax.axis_index("wg")

            @plgpu.nd_loop((m_iters * n_iters,), collective_axes="sm")
            def _(info):
                (lin,) = info.index
                mi, ni = plgpu.planar_snake(lin, (m_iters, n_iters), config.grid_minor_dim, config.grid_tile_width)
                rows = pl.ds(mi * cta_m, cta_m)
                if wg_m:
                    wg_rows, wg_cols, out_cols = pl.ds(wg * tile_m, tile_m), slice(None), slice(None)
                else:
                    wg_rows, wg_cols, out_cols = slice(None), pl.ds(wg * tile_n, tile_n), pl.ds(wg * half, half)

                def context(run):
                    @functools.partial(pl.run_scoped, acc_ref=plgpu.ACC((tile_m, tile_n), jnp.float32))
                    def _(acc_ref):
                        run(acc_ref)
                        acc = acc_ref[...]
                        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                        for ei in range(tile_m // epi_m):
                            for ej in range(half // epi_n):
                                r = slice(ei * epi_m, (ei + 1) * epi_m)
                                value = acc[r, ej * epi_n:(ej + 1) * epi_n]
                                gate = acc[r, half + ej * epi_n:half + (ej + 1) * epi_n]
                                slot = (ei * (half // epi_n) + ej) % 2
                                plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                                out_smem[wg, slot] = (value * (gate / (1.0 + jnp.exp(-gate)))).astype(dtype)
                                plgpu.commit_smem()
                                plgpu.copy_smem_to_gmem(
                                    out_smem.at[wg, slot],
                                    out_gmem.at[rows, pl.ds(ni * (cta_n // 2), cta_n // 2)].at[wg_rows, out_cols]
                                    .at[r, pl.ds(ej * epi_n, epi_n)])

                def mma(_, x_smem, w_smem, acc_ref):
                    plgpu.wgmma(acc_ref, x_smem.at[wg_rows], w_smem.at[:, wg_cols])
                    plgpu.wgmma_wait(0)
                    return acc_ref

                pipeline(mma, context)(x_gmem.at[rows, :], w_gmem.at[:, pl.ds(ni * cta_n, cta_n)], allocations=allocs)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    f = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((m, n // 2), dtype), grid=(hm.get_num_sms(),),
                     grid_names=("sm",), num_threads=3, thread_name="wg",
                     compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup))
    return f(x, w)


def triton_swiglu_matmul(x, w, bm, bh, bk, warps, stages, product=True, group=8):
    # The same product in the epilogue of a Triton GEMM (Pallas's Triton backend, the route our other kernels
    # take into the Go graph), w in FastH3's own column order: each program holds two float32 accumulators,
    # value columns ni*bh.. and the same gate columns F + ni*bh.., fed by one A tile a K step. Launch order in
    # groups of `group` row blocks (Triton's matmul tutorial), for L2 reuse of the weight tiles. product=False
    # writes both accumulators instead (the main loop alone, against XLA's dot).
    from jax import lax
    from gen_triton import pallas_triton
    (m, k), n = x.shape, w.shape[1]
    f = n // 2
    if m % bm or f % bh or k % bk:
        raise ValueError(f"{x.shape} x {w.shape} does not tile by {bm} x {bh} x {bk}")
    nm, nn = m // bm, f // bh

    def kernel(x_ref, w_ref, o_ref):
        pid = pl.program_id(0)
        per_group = group * nn
        first = (pid // per_group) * group
        size = jnp.minimum(nm - first, group)
        mi = first + (pid % per_group) % size
        ni = (pid % per_group) // size
        rows = pl.ds(pl.multiple_of(mi * bm, bm), bm)
        vcols = pl.ds(pl.multiple_of(ni * bh, bh), bh)
        gcols = pl.ds(pl.multiple_of(f + ni * bh, bh), bh)

        def step(i, accs):
            av, ag = accs
            kk = pl.ds(pl.multiple_of(i * bk, bk), bk)
            a = x_ref[rows, kk]
            av = av + jnp.dot(a, w_ref[kk, vcols], preferred_element_type=jnp.float32)
            ag = ag + jnp.dot(a, w_ref[kk, gcols], preferred_element_type=jnp.float32)
            return av, ag

        zero = jnp.zeros((bm, bh), jnp.float32)
        av, ag = lax.fori_loop(0, k // bk, step, (zero, zero))
        if product:
            o_ref[rows, vcols] = (av * (ag / (1.0 + jnp.exp(-ag)))).astype(o_ref.dtype)
        else:
            o_ref[rows, vcols] = av.astype(o_ref.dtype)
            o_ref[rows, gcols] = ag.astype(o_ref.dtype)

    return pallas_triton(kernel, warps, stages, out_shape=jax.ShapeDtypeStruct((m, f if product else n), x.dtype),
                         grid=(nm * nn,))(x, w)


TRITON_CONFIGS = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 4, 4), (128, 64, 64, 8, 4),
                  (64, 128, 64, 4, 4), (128, 128, 32, 8, 5)]


def interleave_tiles(w, tile_n=128):
    # w [K, 2F] (value columns, then gate columns, as FastH3's ff.net.0.proj) to the kernel's order: tile j holds
    # value columns j*half .. (j+1)*half, then the same gate columns.
    k, n = w.shape
    f, half = n // 2, tile_n // 2
    v, g = w[:, :f].reshape(k, f // half, half), w[:, f:].reshape(k, f // half, half)
    return jnp.concatenate([v, g], axis=2).reshape(k, n)


# FastH3's release block at 832x480x124 (dit/h3/config.go): hidden 5,376, FFN width 14,336 (its input
# projection 2 x 14,336 wide), attention width 56 x 128.
# proj2 and proj4 are two and four projections of the attention input as one GEMM (q|k|v|gate): XLA's dot only,
# to see whether a wider GEMM runs at a higher rate.
SHAPES = {"ffn_in": (5376, 2 * 14336), "proj": (5376, 7168), "ffn_out": (14336, 5376), "proj2": (5376, 2 * 7168),
          "proj4": (5376, 4 * 7168)}
XLA_ONLY = {"proj2", "proj4"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=14937)
    ap.add_argument("--shapes", default="ffn_in")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    try:
        from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
    except ImportError as e:
        sys.exit(f"this JAX has no hopper_matmul_mgpu: {e}")
    M, N = hm.MatmulDimension.M, hm.MatmulDimension.N
    print("jax", jax.__version__, "device", jax.devices()[0].device_kind, flush=True)
    rng = np.random.default_rng(0)
    # The card idles at a low clock: two seconds of GEMMs first (session 34 saw the first timings run slow).
    warm = jax.jit(lambda a: a @ a)
    w = jnp.asarray(rng.standard_normal((8192, 8192), dtype=np.float32)).astype(jnp.bfloat16)
    end = time.perf_counter() + 2
    while time.perf_counter() < end:
        jax.block_until_ready(warm(w))
    for name in args.shapes.split(","):
        k, n = SHAPES[name]
        m = args.rows
        mp = -(-m // 256) * 256
        a = jnp.asarray(rng.standard_normal((mp, k), dtype=np.float32)).astype(jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((k, n), dtype=np.float32) / np.sqrt(k)).astype(jnp.bfloat16)
        flops = lambda rows: 2 * rows * k * n
        dot = jax.jit(lambda a, b: a @ b)
        want = dot(a, b)
        t_xla = timed(lambda: dot(a, b), args.iters)
        a_m = a[:m]
        t_xla_m = timed(lambda: dot(a_m, b), args.iters)
        row = [f"XLA dot {t_xla * 1e3:.3f} ms ({flops(mp) / t_xla / 1e12:.0f} TFLOP/s) at {mp} rows, "
               f"{t_xla_m * 1e3:.3f} ms ({flops(m) / t_xla_m / 1e12:.0f}) at {m}"]
        if name == "ffn_in":
            f = n // 2
            swiglu = jax.jit(lambda a, b: (lambda u: u[:, :f] * jax.nn.silu(u[:, f:]))(a @ b))
            t_sw = timed(lambda: swiglu(a_m, b), args.iters)
            row.append(f"XLA dot then SwiGLU's product {t_sw * 1e3:.3f} ms at {m} rows")
        print(f"{name} [{m} x {k}] x [{k} x {n}]: " + "; ".join(row), flush=True)
        results = []
        if name in XLA_ONLY:
            continue
        if name == "ffn_in":
            want_sw = np.asarray(swiglu(a, b), np.float32)
            t_sw_p = timed(lambda: swiglu(a, b), args.iters)
            print(f"  XLA dot then product at {mp} rows: {t_sw_p * 1e3:.3f} ms", flush=True)
            for bm, bh, bk, warps, stages in TRITON_CONFIGS:
                label = f"Triton {bm}x(2x{bh})x{bk}, {warps} warps, {stages} stages"
                for product in (False, True):
                    try:
                        g = jax.jit(lambda a, b, c=(bm, bh, bk, warps, stages), p=product: triton_swiglu_matmul(a, b, *c, product=p))
                        got = np.asarray(g(a, b), np.float32)
                        t = timed(lambda: g(a, b), args.iters)
                    except Exception as e:
                        print(f"  {label}, product {product}: {type(e).__name__}: {str(e)[:400]}", flush=True)
                        break
                    ref = want_sw if product else np.asarray(want, np.float32)
                    what = (f"SwiGLU epilogue {t * 1e3:.3f} ms ({t / t_sw_p:.3f}x XLA's dot then product)" if product else
                            f"GEMM {t * 1e3:.3f} ms ({flops(mp) / t / 1e12:.0f} TFLOP/s, {t / t_xla:.3f}x XLA's dot)")
                    print(f"  {label}: {what}; max diff {float(np.abs(got - ref).max()):.3g} of {float(np.abs(ref).max()):.3g}", flush=True)
        for steps, minor, width, wgd in itertools.product((4, 5) if name == "ffn_in" else (4,), (M, N), (4, 16), (M, N)):
            cfg = hm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=steps,
                                  grid_minor_dim=minor, grid_tile_width=width, wg_dimension=wgd)
            label = f"{steps} steps, minor {minor}, width {width}, warpgroups along {wgd}"
            try:
                g = jax.jit(lambda a, b, cfg=cfg: hm.matmul(a, b, None, cfg))
                got = g(a, b)
                t = timed(lambda: g(a, b), args.iters)
            except Exception as e:  # a config this JAX or the card refuses
                print(f"  mosaic {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            err = float(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32)).max())
            scale = float(jnp.abs(want.astype(jnp.float32)).max())
            print(f"  mosaic {label}: {t * 1e3:.3f} ms ({flops(mp) / t / 1e12:.0f} TFLOP/s, {t / t_xla:.3f}x XLA's), "
                  f"max diff from XLA {err:.3g} of {scale:.3g}", flush=True)
            results.append((t, label, cfg))
        results.sort(key=lambda r: r[0])
        if results:
            print(f"{name}: best mosaic {results[0][0] * 1e3:.3f} ms ({results[0][1]}), "
                  f"{results[0][0] / t_xla:.3f}x XLA's dot at the same rows", flush=True)
        if name == "ffn_in":
            # The product in our epilogue at the GEMM's four best configs, against XLA's dot then product at the
            # same (padded) rows. XLA rounds the dot's output to bf16 before the product; the epilogue does not.
            bi = interleave_tiles(b)
            for _, label, cfg in results[:4] or [(0, "default", hm.TuningConfig(128, 128, 64, 4))]:
                try:
                    g = jax.jit(lambda a, b, cfg=cfg: swiglu_matmul(a, b, cfg))
                    got = np.asarray(g(a, bi), np.float32)
                    t = timed(lambda: g(a, bi), args.iters)
                except Exception as e:
                    print(f"  SwiGLU epilogue, {label}: {type(e).__name__}: {str(e)[:600]}", flush=True)
                    continue
                print(f"  SwiGLU epilogue, {label}: {t * 1e3:.3f} ms against XLA's dot then product {t_sw_p * 1e3:.3f} ms "
                      f"({t / t_sw_p:.3f}x); max diff {float(np.abs(got - want_sw).max()):.3g} of {float(np.abs(want_sw).max()):.3g}",
                      flush=True)


if __name__ == "__main__":
    main()
