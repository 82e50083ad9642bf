# Whether a Mosaic GPU kernel can reach the plugin as MLIR text rather than bytecode, and how its text
# depends on the geometry: the question behind a fine-stage kernel that Go instantiates for any geometry
# from one template, instead of one module a geometry made by JAX on the GPU machine.
#
# Why it may: the plugin's handler (jaxlib/mosaic/gpu/custom_call.cc, Compile) reads the `module` attribute
# with mlir::parseSourceString, which takes text as well as bytecode, runs the serde pass to deserialize it,
# and keys the compiled kernel by `kernel_hash` only. This script lowers bench/vsa_mosaic_draft.py's kernel
# as JAX does, captures the module after JAX's serde pass and, in text mode, hands the plugin that module's
# text (with its SHA-256 as the hash) in place of the bytecode (internal/xlaext/testdata/mosaic_template.py's
# hooks on jax/experimental/mosaic/gpu/core.py, _mosaic_gpu_lowering_rule). For each geometry it prints
# whether the text-mode output equals the bytecode-mode output bit for bit and both timings, and writes the
# text to OUTDIR/draft_<geometry>.mlir (normalized: its dump_basename set to "entry", as the templates are
# made from), so that two geometries' texts can be compared line by line.
#
#   python3 bench/mosaic_text_probe.py --upstream DIR --outdir OUTDIR [GEOMETRY ...]
import argparse, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np
import jax, jax.numpy as jnp

import vsa_mosaic_draft as draft  # noqa: E402
from vsa_inputs import parse  # noqa: E402
import gen_vsa_triton as G  # noqa: E402
import mosaic_template  # noqa: E402 (internal/xlaext/testdata: the hooks on JAX's lowering)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--outdir", required=True)
    args, cases = parse(ap)
    os.makedirs(args.outdir, exist_ok=True)
    for c in cases:
        lists = (jnp.asarray(c.idx[0]), jnp.asarray(c.num[0]), jnp.asarray(c.sizes[c.idx[0]].astype(np.int32)))
        ops = [c.q[0], c.k[0], c.v[0], lists]
        fn = lambda *a: draft.vsa_mosaic(*a)
        text = mosaic_template.lowered_text(fn, *ops)
        outs, times = {}, {}
        f = jax.jit(fn)
        outs["bytecode"], times["bytecode"] = np.asarray(f(*ops)), G.timed(lambda: f(*ops), 20)
        try:  # the text mode's failure is the answer, not a crash
            g = mosaic_template.compile_text(fn, text, *ops)
            outs["text"], times["text"] = np.asarray(g(*ops)), G.timed(lambda: g(*ops), 20)
        except Exception as e:
            print(f"{c.label} text: {type(e).__name__}: {str(e)[:600]}", flush=True)
        with open(os.path.join(args.outdir, f"draft_{c.label}.mlir"), "w") as fh:
            fh.write(text)
        same = "text" in outs and np.array_equal(outs["bytecode"].view(np.uint16), outs["text"].view(np.uint16))
        print(f"{c.label}: module text {len(text)} chars; text-mode output equal to bytecode's: {same}; "
              + ", ".join(f"{m} {t * 1e3:.3f} ms" for m, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
