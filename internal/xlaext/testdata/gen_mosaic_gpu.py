# Mosaic GPU kernel fixtures for internal/xlaext's GPU test (TestMosaicGPUCallOnGPU): kernels written in
# JAX's Pallas with the Mosaic GPU backend, lowered by JAX to the `mosaic_gpu_v2` custom call, whose
# handler JAX links into its CUDA PJRT plugin (jaxlib/mosaic/gpu/custom_call.cc; the Go binaries load
# that plugin). This script takes the call's backend config out of JAX's StableHLO text (the kernel's
# module, as MLIR bytecode) and writes it with the inputs and JAX's own outputs:
#   add        an elementwise add, the smallest kernel: the call itself
#   attention  JAX's FlashAttention-3 forward for Hopper (jax/experimental/pallas/ops/gpu/attention_mgpu.py:
#              warpgroup MMA, TMA copies, a memory warpgroup feeding two compute warpgroups of 64 query
#              rows each), the kernel class a block-sparse attention of 64-row tiles would build on
#
# Run it on the GPU machine, with the JAX whose CUDA plugin the Go binaries load (the module is bytecode
# for the Mosaic GPU linked into that plugin):
#
#   python3 internal/xlaext/testdata/gen_mosaic_gpu.py [--bench] [OUT.json]   # default: mosaic_gpu_kernels.json here
#
# --bench also times the attention kernel against cuDNN's (jax.nn.dot_product_attention) at the FastH3
# DiT's dense geometry (14,976 rows, 56 heads of 128, float16 as the kernel stages them) for each key block, the question being how
# far this kernel class goes on the H200 before a block-sparse variant of it is written. Then:
#   bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext
#   cd internal/xlaext && FASTVIDEO_GPU_TEST=1 ../../.gpu/xlaext.test -test.run TestMosaicGPUCallOnGPU -test.v
import argparse, base64, hashlib, json, os, re

import numpy as np
import jax, jax.numpy as jnp

from gen_triton import array, match_brace, mlir_escape, parse_config, timed  # noqa: E402 (beside this file)

TARGET = "mosaic_gpu_v2"
KNOWN = {"kernel_hash", "module", "skip_device_barrier", "use_custom_barrier", "uses_xla_collective_metadata"}


def lowered_mosaic_call(text, operands, case):
    # The one mosaic_gpu_v2 call in JAX's StableHLO text: its config, checked to be what Go writes (the
    # module's escaping, the hash of the module, no other keys, no custom barrier or collectives, no
    # api_version) with the function's own arguments as its operands and its results as the function's.
    calls = [l for l in text.splitlines() if TARGET in l]
    assert len(calls) == 1, f"{case}: {len(calls)} Mosaic GPU custom calls in JAX's lowering"
    line = calls[0]
    ops = re.search(r'@"?' + TARGET + r'"?\(([^)]*)\)', line).group(1)
    want = ", ".join(f"%arg{i}" for i in range(operands))
    assert ops == want, f"{case}: the call takes ({ops}), not the function's arguments ({want}): the fixture needs them to be"
    m = re.search(r'(?:mhlo\.)?backend_config = \{', line)
    assert m, f"{case}: no backend config dictionary: {line[:400]}"
    cfg = parse_config(line[m.end() - 1:match_brace(line, m.end() - 1)])
    other = sorted(k for k in cfg if k not in KNOWN and not k.endswith("@text"))
    assert not other, f"{case}: config keys Go does not write: {other}"
    assert mlir_escape(cfg["module"]) == cfg["module@text"], f"{case}: Go's escaping would not give JAX's module text back"
    if cfg["kernel_hash"] != hashlib.sha256(cfg["module"]).digest():
        # jax/experimental/mosaic/gpu/core.py (_mosaic_gpu_lowering_rule) hashes the very bytes it stores as
        # module, so this should not happen; but the handler only keys its compiled kernels by the hash
        # (jaxlib/mosaic/gpu/custom_call.cc, InstantiateResources / GetOrCreateKernel), so Go's own SHA-256
        # still runs the same kernel: say so rather than lose the fixture. (JAX's pasted back-compat data,
        # jax/_src/internal_test_util/export_back_compat_test_data/pallas/mosaic_gpu_add_one.py, does not
        # match for its bytecode modules, probably edited after the run.)
        print(f"{case}: WARNING kernel_hash is not the module's SHA-256 (Go writes the SHA-256)", flush=True)
    # JAX 0.11.2 writes skip_device_barrier too (JAX 0.11.1 did not): Go writes every key JAX does, false.
    flags = ("skip_device_barrier", "use_custom_barrier", "uses_xla_collective_metadata")
    assert not any(cfg.get(f) for f in flags), f"{case}: a barrier, a skipped barrier or collectives: {[f for f in flags if cfg.get(f)]}"
    # The op's own attributes, the config dictionary (with the module's bytes) cut out. JAX passes
    # api_version=4, but mlir.custom_call turns it to 1 (API_VERSION_ORIGINAL, elided when printed) for a
    # dictionary config (jax/_src/interpreters/mlir.py, custom_call); and its empty operand_output_aliases
    # (jax/experimental/mosaic/gpu/core.py, _mosaic_gpu_lowering_rule) prints nothing. Aliases would mean a
    # GMEM scratch operand (jax/_src/pallas/mosaic_gpu/pallas_call_registration.py), which Go does not add.
    rest = line[:m.start()] + line[match_brace(line, m.end() - 1):]
    for attr in ("api_version", "output_operand_aliases", "has_side_effect = true"):
        assert attr not in rest, f"{case}: JAX wrote {attr}: {rest[:400]}"
    result = line.split("=", 1)[0].strip()
    returned = [l for l in text.splitlines() if l.strip().startswith(("return ", "func.return ", "stablehlo.return "))]
    assert any(result.split(":")[0] in r for r in returned), f"{case}: the function does not return the call's results ({result})"
    return cfg


def mosaic_call(kernel, out_type):
    # plgpu.kernel, JAX 0.11's entry point for Mosaic GPU kernels (jax/_src/pallas/mosaic_gpu/core.py, kernel;
    # lowered by mpmd_map_mgpu_lowering_rule in jax/_src/pallas/mosaic_gpu/pallas_call_registration.py, the
    # path attention_mgpu.py takes too): pl.pallas_call has no backend= argument
    # (jax/_src/pallas/pallas_call.py) and warns that Mosaic GPU through it is deprecated
    # ("jax-pallas-call-mgpu"). The refs are the whole arrays in GMEM, one program: the form of JAX's own
    # fixture (tests/pallas/export_back_compat_pallas_test.py, test_mosaic_gpu_kernel_add_one).
    import jax.experimental.pallas.mosaic_gpu as plgpu
    return plgpu.kernel(kernel, out_type=out_type, grid=(1,), grid_names=("x",))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "mosaic_gpu_kernels.json"))
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    from jax.experimental.pallas.ops.gpu import attention_mgpu as fa3

    rng = np.random.default_rng(0)
    fixture = {"generator": "internal/xlaext/testdata/gen_mosaic_gpu.py", "jax": jax.__version__, "device": str(jax.devices()[0]), "kernels": []}

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    x = rng.standard_normal(256, dtype=np.float32)
    y = rng.standard_normal(256, dtype=np.float32)
    config = fa3.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
    # float16: this version of the kernel stages q, k and v in float16 shared memory (its entry()).
    q, k, v = (jnp.asarray(rng.standard_normal((1, 256, 2, 128), dtype=np.float32)).astype(jnp.float16) for _ in range(3))
    cases = {
        "add": (jax.jit(mosaic_call(add_kernel, jax.ShapeDtypeStruct((256,), jnp.float32))), [x, y], lambda: x + y),
        "attention": (jax.jit(lambda q, k, v: fa3.attention(q, k, v, config=config)), [q, k, v],
                      lambda: np.asarray(fa3.attention_reference(q, k, v), np.float32)),
    }
    for case, (f, inputs, reference) in cases.items():
        want = np.asarray(f(*inputs))
        err = float(np.abs(want.astype(np.float32) - np.asarray(reference(), np.float32)).max())
        cfg = lowered_mosaic_call(f.lower(*inputs).as_text(), len(inputs), case)
        print(f"{case}: kernel vs reference max err {err:.3g}, module {len(cfg['module'])} bytes")
        fixture["kernels"].append({"case": case, "module": base64.b64encode(cfg["module"]).decode(),
                                   "inputs": [array(a) for a in inputs], "outputs": [array(want)]})
    with open(args.out, "w") as fh:
        json.dump(fixture, fh, indent=1)
    print("wrote", args.out)

    if args.bench:
        b, s, h, d = 1, 14976, 56, 128
        q, k, v = (jnp.asarray(rng.standard_normal((b, s, h, d), dtype=np.float32)).astype(jnp.float16) for _ in range(3))
        flops = 4 * b * h * s * s * d
        cudnn = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn"))
        try:  # the Mosaic GPU timings below still come when cuDNN's kernel is refused
            t = timed(lambda: cudnn(q, k, v), 10)
            print(f"dense {s} rows, {h} heads x {d}: cuDNN {t * 1e3:.3f} ms ({flops / t / 1e12:.0f} TFLOP/s)", flush=True)
        except Exception as e:
            print(f"dense {s} rows, {h} heads x {d}: cuDNN {type(e).__name__}: {str(e)[:200]}", flush=True)
        for block_kv in (64, 128):
            for steps in (2, 4):
                cfg = fa3.TuningConfig(block_q=64, block_kv=block_kv, max_concurrent_steps=steps)
                try:
                    f = jax.jit(lambda q, k, v, cfg=cfg: fa3.attention(q, k, v, config=cfg))
                    t = timed(lambda: f(q, k, v), 10)
                except Exception as e:
                    print(f"  mosaic gpu block_kv {block_kv}, {steps} steps: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                print(f"  mosaic gpu FA3, block_q 64, block_kv {block_kv}, {steps} steps: {t * 1e3:.3f} ms ({flops / t / 1e12:.0f} TFLOP/s)", flush=True)


if __name__ == "__main__":
    main()
