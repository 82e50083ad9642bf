#!/usr/bin/env python3
"""The q/k norm-and-rotation pass of a DiT block in the forms our graphs can write, timed through the
XLA that the project's CUDA plugin carries (JAX on the GPU machine), each checked bit for bit against
the form the graphs wrote first.

Why: in a kernel trace of FastH3's VSA forward (bench/vsa_row.sh, trace_h3.csv) the pass over q and
over k (dit/h3/graph.go qkNormRope) is XLA's `input_concatenate_fusion`, 0.256 ms a tensor on an H100,
where the block's other elementwise passes over as many elements take 0.13-0.17 ms: the concatenates
that build the rotated half and put the unrotated channels back make XLA emit a concatenate fusion.
The forms here compute the same float32 products without a concatenate:
  h3 (half-split rotation of the first `rot` channels, dit/h3/graph.go applyRope)
    concat   the graph's form: slices, Concatenate([-x2, x1]), Concatenate([rotated, rest])
    shift    x·C + pad(x[rot/2:])·A + pad(x[:dh-rot/2], low=rot/2)·B, tables [L, dh] (C = cos and 1 for
             the unrotated channels, A = -sin on the first half, B = sin on the second, 0 elsewhere)
  wan (interleaved pairs, dit/wan/graph.go applyRope)
    stack    the graph's form: the pairs' two halves rotated apart and stacked back
    reverse  x·C + reverse(x over each pair)·S, tables [L, dh/2, 2] (C = cos cos, S = -sin sin)

  python3 bench/rope_forms.py [--iters 50]

Measured (session 27, one H100, BENCHMARKS.md): the shift form is slower than the concatenates (0.353
against 0.308 ms), the reverse form faster (0.130 against 0.174 ms); in the Go forwards neither moved
the whole forward beyond run-to-run spread, so the graphs keep their forms.
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np


def h3_normed(x, w, eps):
    # The per-head RMSNorm's statistic and x·w (dit/h3/graph.go qkNormRope: the statistic applied last).
    xf = x.astype(jnp.float32)
    return xf * w.astype(jnp.float32), jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)


def wan_normed(x, w, eps):
    # The RMSNorm over all heads' channels (dit/wan/graph.go qkNorm): x·w and the statistic a row.
    l, h, dh = x.shape[1:]
    xf = x.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(xf.reshape(1, l, h * dh) ** 2, axis=-1, keepdims=True) + eps)
    return xf * w.reshape(1, 1, h, dh).astype(jnp.float32), r[..., None]


def h3_concat(x, w, cos, sin, rot, eps):
    xw, r = h3_normed(x, w, eps)
    half = rot // 2
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    x1, x2 = xw[..., :half], xw[..., half:rot]
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    out = xw[..., :rot] * c + rotated * s
    out = jnp.concatenate([out, xw[..., rot:]], axis=-1)
    return (out * r).astype(x.dtype)


def h3_tables(cos, sin, rot, dh):
    half = rot // 2
    l = cos.shape[0]
    c = jnp.concatenate([cos, jnp.ones((l, dh - rot), jnp.float32)], -1)
    a = jnp.concatenate([-sin[:, :half], jnp.zeros((l, dh - half), jnp.float32)], -1)
    b = jnp.concatenate([jnp.zeros((l, half), jnp.float32), sin[:, half:], jnp.zeros((l, dh - rot), jnp.float32)], -1)
    return c, a, b


def h3_shift(x, w, c, a, b, rot, eps):
    dh = x.shape[-1]
    half = rot // 2
    xw, r = h3_normed(x, w, eps)
    zero = jnp.float32(0)
    left = jax.lax.pad(xw[..., half:], zero, [(0, 0, 0)] * 3 + [(0, half, 0)])  # x[c+half]
    right = jax.lax.pad(xw[..., : dh - half], zero, [(0, 0, 0)] * 3 + [(half, 0, 0)])  # x[c-half]
    out = xw * c[None, :, None, :] + left * a[None, :, None, :] + right * b[None, :, None, :]
    return (out * r).astype(x.dtype)


def wan_stack(x, w, cos, sin, eps):
    l, h, dh = x.shape[1:]
    xw, r = wan_normed(x, w, eps)
    pairs = xw.reshape(1, l, h, dh // 2, 2)
    re, im = pairs[..., 0], pairs[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = jnp.stack([re * c - im * s, im * c + re * s], -1).reshape(1, l, h, dh)
    return (out * r).astype(x.dtype)


def wan_reverse(x, w, c2, s2, eps):
    l, h, dh = x.shape[1:]
    xw, r = wan_normed(x, w, eps)
    pairs = xw.reshape(1, l, h, dh // 2, 2)
    out = pairs * c2[None, :, None] + jax.lax.rev(pairs, (4,)) * s2[None, :, None]
    return (out.reshape(1, l, h, dh) * r).astype(x.dtype)


def timed(name, fn, args, iters, ref=None):
    f = jax.jit(fn)
    y = f(*args)
    y.block_until_ready()
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            y = f(*args)
        y.block_until_ready()
        ts.append((time.perf_counter() - t0) / iters * 1e3)
    nbytes = 2 * args[0].size * args[0].dtype.itemsize
    med = sorted(ts)[1]
    note = ""
    if ref is not None:
        d = np.asarray(y.astype(jnp.float32)) - np.asarray(ref.astype(jnp.float32))
        note = f"; max abs diff from the graph's form {np.abs(d).max():.3g}, bits equal {bool((np.asarray(y) == np.asarray(ref)).all())}"
    print(f"{name:12s} {' / '.join(f'{t:.3f}' for t in ts)}  median {med:.3f} ms ({nbytes / med / 1e6:.0f} GB/s counting x in and out){note}", flush=True)
    return y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=50)
    a = p.parse_args()
    print(jax.devices()[0].device_kind, "jax", jax.__version__, flush=True)
    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    # FastH3: 14,937 rows, 56 heads of 128, the first 96 channels rotated.
    l, h, dh, rot = 14937, 56, 128, 96
    x = jax.random.normal(k1, (1, l, h, dh), jnp.float32).astype(jnp.bfloat16)
    w = (1 + 0.1 * jax.random.normal(k2, (dh,), jnp.float32)).astype(jnp.bfloat16)
    ang = jax.random.uniform(k3, (l, rot), jnp.float32) * 6.28
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    ref = timed("h3 concat", lambda x, w, cos, sin: h3_concat(x, w, cos, sin, rot, 1e-6), (x, w, cos, sin), a.iters)
    c, aa, b = h3_tables(cos, sin, rot, dh)
    timed("h3 shift", lambda x, w, c, aa, b: h3_shift(x, w, c, aa, b, rot, 1e-6), (x, w, c, aa, b), a.iters, ref)
    # FastWan 1.3B at 480x832x81: 32,760 rows, 12 heads of 128.
    l, h, dh = 32760, 12, 128
    x = jax.random.normal(k1, (1, l, h, dh), jnp.float32).astype(jnp.bfloat16)
    w = (1 + 0.1 * jax.random.normal(k2, (h * dh,), jnp.float32)).astype(jnp.bfloat16)
    ang = jax.random.uniform(k4, (l, dh // 2), jnp.float32) * 6.28
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    ref = timed("wan stack", lambda x, w, cos, sin: wan_stack(x, w, cos, sin, 1e-6), (x, w, cos, sin), a.iters)
    c2 = jnp.stack([cos, cos], -1)
    s2 = jnp.stack([-sin, sin], -1)
    timed("wan reverse", lambda x, w, c2, s2: wan_reverse(x, w, c2, s2, 1e-6), (x, w, c2, s2), a.iters, ref)


if __name__ == "__main__":
    main()
