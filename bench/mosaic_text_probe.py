# Whether a Mosaic GPU kernel can reach the plugin as MLIR text rather than bytecode, and how its text
# depends on the geometry: the question behind a fine-stage kernel that Go instantiates for any geometry
# from one template, instead of one module a geometry made by JAX on the GPU machine.
#
# Why it may: the plugin's handler (jaxlib/mosaic/gpu/custom_call.cc, Compile) reads the `module` attribute
# with mlir::parseSourceString, which takes text as well as bytecode, runs the serde pass to deserialize it,
# and keys the compiled kernel by `kernel_hash` only. This script lowers bench/vsa_mosaic_draft.py's kernel
# as JAX does, captures the module after JAX's serde pass (jax/experimental/mosaic/gpu/core.py,
# _mosaic_gpu_lowering_rule) and, in text mode, hands the plugin that module's text (with its SHA-256 as
# the hash) in place of the bytecode. For each geometry it prints whether the text-mode output equals the
# bytecode-mode output bit for bit and both timings, and writes the text to OUTDIR/draft_<geometry>.mlir,
# so that two geometries' texts can be compared line by line.
#
#   python3 bench/mosaic_text_probe.py --upstream DIR --outdir OUTDIR [GEOMETRY ...]
import argparse, hashlib, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np
import jax, jax.numpy as jnp
import jax.experimental.mosaic.gpu.core as mosaic_core

import vsa_mosaic_draft as draft  # noqa: E402
from vsa_inputs import parse  # noqa: E402
import gen_vsa_triton as G  # noqa: E402

ir = mosaic_core.ir  # the MLIR bindings JAX's lowering uses
captured = {}
text_mode = {"on": False}
_serde = mosaic_core._run_serde_pass
_custom_call = mosaic_core.mlir.custom_call


def serde(module, **kw):
    module = _serde(module, **kw)
    if kw.get("serialize"):
        captured["text"] = module.operation.get_asm(enable_debug_info=False)
    return module


def custom_call(*args, **kw):
    if text_mode["on"] and kw.get("call_target_name") == "mosaic_gpu_v2":
        text = captured["text"].encode()
        kw["backend_config"] = dict(kw["backend_config"], module=ir.StringAttr.get(text),
                                    kernel_hash=ir.StringAttr.get(hashlib.sha256(text).digest()))
    return _custom_call(*args, **kw)


mosaic_core._run_serde_pass = serde
mosaic_core.mlir.custom_call = custom_call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--outdir", required=True)
    args, cases = parse(ap)
    os.makedirs(args.outdir, exist_ok=True)
    for c in cases:
        lists = (jnp.asarray(c.idx[0]), jnp.asarray(c.num[0]), jnp.asarray(c.sizes[c.idx[0]].astype(np.int32)))
        ops = [c.q[0], c.k[0], c.v[0], lists]
        outs, times = {}, {}
        for mode in ("bytecode", "text"):
            text_mode["on"] = mode == "text"
            f = jax.jit(lambda *a: draft.vsa_mosaic(*a))
            try:
                outs[mode] = np.asarray(f(*ops))
                times[mode] = G.timed(lambda: f(*ops), 20)
            except Exception as e:  # the text mode's failure is the answer, not a crash
                print(f"{c.label} {mode}: {type(e).__name__}: {str(e)[:600]}", flush=True)
        with open(os.path.join(args.outdir, f"draft_{c.label}.mlir"), "w") as fh:
            fh.write(captured["text"])
        same = "text" in outs and np.array_equal(outs["bytecode"].view(np.uint16), outs["text"].view(np.uint16))
        print(f"{c.label}: module text {len(captured['text'])} chars; text-mode output equal to bytecode's: {same}; "
              + ", ".join(f"{m} {t * 1e3:.3f} ms" for m, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
