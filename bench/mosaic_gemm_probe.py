# Can a Mosaic GPU GEMM (JAX's Pallas, backend="mosaic_gpu") match cuBLAS at FastH3's FFN input projection? The
# question behind the largest item left on issue 32's DiT line: SwiGLU's product is a separate pass over the
# FFN-in GEMM's output (0.41 ms a block on an H100, BENCHMARKS.md session 33), which a GEMM of our own could do
# in its epilogue (value and gate columns interleaved so that a tile holds both), writing half the output. That
# pays only if the GEMM itself runs as fast as the cuBLAS kernel XLA picks (~740 TFLOP/s there).
#
# It times JAX's own Hopper matmul, jax/experimental/pallas/ops/gpu/hopper_matmul_mgpu.py (matmul_kernel,
# imported unchanged from the JAX on the GPU machine: TMA, wgmma, two compute warpgroups and a memory one,
# a persistent grid), at a few of its tuning configs, against XLA's dot (cuBLAS) on the same bf16 inputs, and
# XLA's dot followed by SwiGLU's product (what the Go graph runs today) against swiglu_matmul below, the same
# main loop with the product in its epilogue:
#
#   python3 bench/mosaic_gemm_probe.py [--rows 14937] [--shapes ffn_in,proj,ffn_out]
#
# The kernel needs M a multiple of 2·tile_m: rows are padded to one (XLA's dot is timed at both sizes).
import argparse, itertools, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "internal", "xlaext", "testdata"))

import numpy as np
import jax, jax.numpy as jnp

from gen_triton import timed  # noqa: E402

def swiglu_matmul(x, w, steps=4, minor=None, width=1, tile_m=128, tile_n=128, tile_k=64):
    # SwiGLU's input projection with the product in the epilogue: x [M, K] times w [K, 2F] whose columns are
    # interleaved by tile (interleave_tiles), out [M, F] = value * silu(gate) computed on the float32
    # accumulator and rounded once. The main loop is the shape of JAX's Hopper matmul above (a persistent grid
    # of one program an SM walking output tiles in a planar snake, a memory warpgroup streaming A and B tiles
    # by TMA for two compute warpgroups of tile_m rows each); only the epilogue is SwiGLU's. Written without a
    # device (session 34) against the Pallas Mosaic GPU API of hopper_matmul_mgpu.py.
    import functools
    from jax import lax
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
    from jax.extend import backend

    dtype = x.dtype
    (m, k), n = x.shape, w.shape[1]
    half = tile_n // 2
    assert m % (2 * tile_m) == 0 and n % tile_n == 0 and k % tile_k == 0, (x.shape, w.shape)
    m_iters, n_iters, k_iters = m // (2 * tile_m), n // tile_n, k // tile_k
    swizzle = plgpu.find_swizzle(tile_k * jnp.dtype(dtype).itemsize * 8)
    transforms = (plgpu.TilingTransform((8, swizzle // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(swizzle))
    out_swizzle = plgpu.find_swizzle(half * jnp.dtype(dtype).itemsize * 8)
    out_transforms = (plgpu.TilingTransform((8, out_swizzle // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(out_swizzle))
    minor = hm.MatmulDimension.N if minor is None else minor

    def kernel(x_gmem, w_gmem, out_gmem, out_smem):
        def pipeline(body, context):
            return plgpu.emit_pipeline_warp_specialized(
                body, grid=(k_iters,), memory_registers=40,
                in_specs=[plgpu.BlockSpec((2 * tile_m, tile_k), lambda kk: (0, kk), transforms=transforms, memory_space=plgpu.SMEM),
                          plgpu.BlockSpec((tile_k, tile_n), lambda kk: (kk, 0), transforms=transforms, memory_space=plgpu.SMEM)],
                wg_axis="wg", num_compute_wgs=2, max_concurrent_steps=steps, compute_context=context)

        nothing = lambda *_, **__: None

        @functools.partial(pl.run_scoped, allocs=pipeline(nothing, nothing).get_allocations(x_gmem, w_gmem), collective_axes="wg")
        def _(allocs):
            wg = lax.axis_index("wg")

            @plgpu.nd_loop((m_iters * n_iters,), collective_axes="sm")
            def _(idxs):
                mi, ni = plgpu.planar_snake(idxs[0], (m_iters, n_iters), minor, width)
                rows = pl.ds(mi * 2 * tile_m, 2 * tile_m)
                wg_rows = pl.ds(wg * tile_m, tile_m)

                def context(run):
                    @functools.partial(pl.run_scoped, acc_ref=plgpu.ACC((tile_m, tile_n), jnp.float32))
                    def _(acc_ref):
                        run(acc_ref)
                        acc = acc_ref[...]
                        value, gate = acc[:, :half], acc[:, half:]
                        h = (value * (gate / (1.0 + jnp.exp(-gate)))).astype(dtype)
                        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                        out_smem[wg] = h
                        plgpu.commit_smem()
                        plgpu.copy_smem_to_gmem(out_smem.at[wg], out_gmem.at[rows, pl.ds(ni * half, half)].at[wg_rows])

                def mma(_, x_smem, w_smem, acc_ref):
                    plgpu.wgmma(acc_ref, x_smem.at[wg_rows], w_smem)
                    plgpu.wgmma_wait(0)
                    return acc_ref

                pipeline(mma, context)(x_gmem.at[rows, :], w_gmem.at[:, pl.ds(ni * tile_n, tile_n)], allocations=allocs)
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)

    f = plgpu.kernel(kernel, out_shape=jax.ShapeDtypeStruct((m, n // 2), dtype), grid=(backend.get_default_device().core_count,),
                     grid_names=("sm",), num_threads=3, thread_name="wg",
                     scratch_shapes=[plgpu.SMEM((2, tile_m, half), dtype, transforms=out_transforms)])
    return f(x, w)


def interleave_tiles(w, tile_n=128):
    # w [K, 2F] (value columns, then gate columns, as FastH3's ff.net.0.proj) to the kernel's order: tile j holds
    # value columns j*half .. (j+1)*half, then the same gate columns.
    k, n = w.shape
    f, half = n // 2, tile_n // 2
    v, g = w[:, :f].reshape(k, f // half, half), w[:, f:].reshape(k, f // half, half)
    return jnp.concatenate([v, g], axis=2).reshape(k, n)


# FastH3's release block at 832x480x124 (dit/h3/config.go): hidden 5,376, FFN width 14,336 (its input
# projection 2 x 14,336 wide), attention width 56 x 128.
SHAPES = {"ffn_in": (5376, 2 * 14336), "proj": (5376, 7168), "ffn_out": (14336, 5376)}


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
        if name == "ffn_in":
            # The product in our epilogue, against XLA's dot then product at the same (padded) rows.
            want_sw = np.asarray(swiglu(a, b), np.float32)
            t_sw_p = timed(lambda: swiglu(a, b), args.iters)
            bi = interleave_tiles(b)
            for steps, minor in itertools.product((4, 5), (hm.MatmulDimension.M, hm.MatmulDimension.N)):
                label = f"SwiGLU epilogue, {steps} steps, minor {minor.name}"
                try:
                    g = jax.jit(lambda a, b, steps=steps, minor=minor: swiglu_matmul(a, b, steps=steps, minor=minor))
                    got = np.asarray(g(a, bi), np.float32)
                    t = timed(lambda: g(a, bi), args.iters)
                except Exception as e:
                    print(f"  {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                # XLA rounds the dot's output to bf16 before the product; the epilogue does not.
                print(f"  {label}: {t * 1e3:.3f} ms against XLA's dot then product {t_sw_p * 1e3:.3f} ms ({t / t_sw_p:.3f}x); "
                      f"max diff {float(np.abs(got - want_sw).max()):.3g} of {float(np.abs(want_sw).max()):.3g}", flush=True)
        best = None
        for tile_n, steps, minor, width in itertools.product((128,), (4, 5), (hm.MatmulDimension.M, hm.MatmulDimension.N), (1, 8)):
            label = f"tile 128x{tile_n}x64, {steps} steps, minor {minor.name}, width {width}"
            try:
                cfg = hm.TuningConfig(tile_m=128, tile_n=tile_n, tile_k=64, max_concurrent_steps=steps,
                                      grid_minor_dim=minor, grid_tile_width=width)
                g = jax.jit(lambda a, b, cfg=cfg: hm.matmul_kernel(a, b, config=cfg))
                got = g(a, b)
                t = timed(lambda: g(a, b), args.iters)
            except Exception as e:  # a config this JAX or the card refuses
                print(f"  {label}: {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            err = float(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32)).max())
            scale = float(jnp.abs(want.astype(jnp.float32)).max())
            print(f"  mosaic {label}: {t * 1e3:.3f} ms ({flops(mp) / t / 1e12:.0f} TFLOP/s, {t / t_xla:.3f}x XLA's), "
                  f"max diff from XLA {err:.3g} of {scale:.3g}", flush=True)
            if best is None or t < best[0]:
                best = (t, label)
        if best:
            print(f"{name}: best mosaic {best[0] * 1e3:.3f} ms ({best[1]}), {best[0] / t_xla:.3f}x XLA's dot at the same rows", flush=True)


if __name__ == "__main__":
    main()
