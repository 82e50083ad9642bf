# Triton kernel fixtures for internal/xlaext's GPU test (TestTritonCallOnGPU): two tiny Pallas kernels
# (backend="triton"), lowered by JAX to XLA's `__gpu$xla.gpu.triton` custom call; this script takes the
# kernel's backend config out of JAX's StableHLO text and writes it with inputs and JAX's own outputs.
#
# Run it on the GPU machine, with the JAX whose CUDA plugin (jax_plugins/xla_cuda*) the Go binaries load:
# the IR is Triton MLIR bytecode, which only the Triton linked into that plugin's XLA reads.
#
#   python3 internal/xlaext/testdata/gen_triton.py [OUT.json]   # default: triton_kernels.json beside this file
#
# Then (docs in internal/xlaext/kernels_gpu_test.go):
#   bash bench/build_gpu.sh -test .gpu/xlaext.test ./internal/xlaext
#   cd internal/xlaext && FASTVIDEO_GPU_TEST=1 ../../.gpu/xlaext.test -test.run TestTritonCallOnGPU -test.v
#
# Adapted from the measured probe (shared/design/xla-triton-call/gen.py, JAX 0.11.2 on the H200). The
# script also checks, on the real bytecode, that re-escaping the IR as Go's stablehlo.MLIRString does
# (printable ASCII but '"' as is, '\' doubled, every other byte \XX uppercase) gives JAX's text back.
import base64, importlib.metadata, json, os, re, sys, time

import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def pallas_triton(kernel, warps, stages, **kw):
    # pl.pallas_call on Pallas's Triton backend with Triton's compile parameters, across the JAX versions
    # that name them differently.
    for modname, cls in [("jax.experimental.pallas.triton", "CompilerParams"), ("jax.experimental.pallas.gpu", "TritonCompilerParams")]:
        try:
            kw["compiler_params"] = getattr(__import__(modname, fromlist=[cls]), cls)(num_warps=warps, num_stages=stages)
            break
        except Exception:
            pass
    try: return pl.pallas_call(kernel, backend="triton", **kw)
    except TypeError: return pl.pallas_call(kernel, **kw)

def match_brace(s, i):
    # s[i] == '{'; the index after the matching '}', skipping quoted strings.
    depth, j, q = 0, i, False
    while j < len(s):
        c = s[j]
        if q:
            if c == '\\': j += 2; continue
            if c == '"': q = False
        elif c == '"': q = True
        elif c == '{': depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0: return j + 1
        j += 1
    raise ValueError("unbalanced braces")

def split_top(s):
    # "a = 1 : i32, b = \"x, y\"" -> entries, splitting at commas outside strings.
    parts, cur, q, j = [], "", False, 0
    while j < len(s):
        c = s[j]
        if q and c == '\\': cur += s[j:j + 2]; j += 2; continue
        if c == '"': q = not q
        if c == ',' and not q: parts.append(cur.strip()); cur = ""
        else: cur += c
        j += 1
    if cur.strip(): parts.append(cur.strip())
    return parts

def mlir_unescape(lit):
    assert lit[0] == '"' and lit[-1] == '"', lit[:40]
    body, b, j = lit[1:-1], bytearray(), 0
    while j < len(body):
        c = body[j]
        if c != '\\': b += c.encode("latin-1"); j += 1; continue
        n = body[j + 1]
        if n in '\\"': b.append(ord(n)); j += 2
        elif n == 'n': b.append(10); j += 2
        elif n == 't': b.append(9); j += 2
        else: b.append(int(body[j + 1:j + 3], 16)); j += 3
    return bytes(b)

def mlir_escape(data):
    # Go's stablehlo.MLIRString (llvm::printEscapedString).
    s = ""
    for c in data:
        if c == 0x5C: s += "\\\\"
        elif 0x20 <= c <= 0x7E and c != 0x22: s += chr(c)
        else: s += "\\%02X" % c
    return '"' + s + '"'

def parse_config(cfg):
    d = {}
    for e in split_top(cfg[1:-1]):
        k, v = e.split(" = ", 1)
        if v.startswith('"'): d[k] = mlir_unescape(v); d[k + "@text"] = v
        elif v in ("true", "false"): d[k] = v == "true"
        else: d[k] = int(re.fullmatch(r"(-?\d+) : i32", v).group(1))
    return d

def lowered_triton_call(text, operands, case):
    # The one `__gpu$xla.gpu.triton` call in JAX's StableHLO text: its backend config (checked to re-escape
    # as Go writes it), JAX's api_version (None when absent) and the config keys Go does not write.
    calls = [l for l in text.splitlines() if "__gpu$xla.gpu.triton" in l]
    assert len(calls) == 1, f"{case}: {len(calls)} Triton custom calls in JAX's lowering"
    ops = re.search(r'@"?__gpu\$xla\.gpu\.triton"?\(([^)]*)\)', calls[0]).group(1)
    assert len(ops.split(",")) == operands, f"{case}: the call takes ({ops}), not the {operands} inputs this fixture records"
    m = re.search(r'(?:mhlo\.)?backend_config = \{', calls[0])
    assert m, f"{case}: no backend config dictionary: {calls[0][:400]}"
    cfg = parse_config(calls[0][m.end() - 1:match_brace(calls[0], m.end() - 1)])
    assert mlir_escape(cfg["ir"]) == cfg["ir@text"], f"{case}: Go's escaping would not give JAX's ir text back"
    api = re.search(r"api_version = (\d+)", calls[0])
    known = {"debug", "grid_x", "grid_y", "grid_z", "ir", "name", "num_stages", "num_warps"}
    other = sorted(k for k in cfg if k not in known and not k.endswith("@text"))
    return cfg, int(api.group(1)) if api else None, other

def plugin_version():
    # The JAX CUDA plugin's distribution and version ("jax-cuda13-plugin 0.11.2"), which a kernel file
    # records: its IR is for the Triton (or Mosaic GPU) inside that plugin.
    for d in importlib.metadata.distributions():
        name = d.metadata["Name"] or ""
        if name.lower().replace("_", "-").startswith("jax-cuda") and name.lower().endswith("plugin"):
            return f"{name} {d.version}"
    return ""


def timed(fn, n):
    # Seconds a call of fn, over n calls after one warm-up that has finished on the device before the clock
    # starts: fn returns JAX arrays, or a torch tensor (upstream's kernels), so that a JAX kernel and
    # upstream's are timed alike.
    def finished(r):
        if hasattr(r, "cpu"):
            import torch
            torch.cuda.synchronize()
        else:
            jax.block_until_ready(r)
    finished(fn())
    t = time.perf_counter()
    for _ in range(n):
        r = fn()
    finished(r)
    return (time.perf_counter() - t) / n


def array(a):
    # A fixture array (internal/xlaext/kernels_gpu_test.go, fixtureArray): bfloat16 and float16 as their
    # 16-bit patterns, anything else as float32.
    a = np.asarray(a)
    for half in ("bfloat16", "float16"):
        if a.dtype == jnp.dtype(half):
            return {"shape": list(a.shape), "dtype": half, "data": base64.b64encode(np.ascontiguousarray(a).view(np.uint16).tobytes()).decode()}
    a = np.ascontiguousarray(a, dtype=np.float32)
    return {"shape": list(a.shape), "dtype": "float32", "data": base64.b64encode(a.tobytes()).decode()}

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_kernels.json")
    N = 32
    def add_kernel(x_ref, y_ref, o_ref): o_ref[...] = x_ref[...] + y_ref[...]
    def dot_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)
    def call(kernel, bx, by, grid, xmap, ymap, omap, oblock):
        return pallas_triton(kernel, 4, 2, out_shape=jax.ShapeDtypeStruct((N, N), jnp.float32), grid=grid,
                             in_specs=[pl.BlockSpec(bx, xmap), pl.BlockSpec(by, ymap)], out_specs=pl.BlockSpec(oblock, omap))
    cases = {
        # grid (4,): rows in blocks of 8
        "add": call(add_kernel, (8, N), (8, N), (N // 8,), lambda i: (i, 0), lambda i: (i, 0), lambda i: (i, 0), (8, N)),
        # grid (2, 2): 16x16 output tiles (grid_y used)
        "dot": call(dot_kernel, (16, N), (N, 16), (N // 16, N // 16), lambda i, j: (i, 0), lambda i, j: (0, j), lambda i, j: (i, j), (16, 16)),
    }

    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, N), dtype=np.float32); y = rng.standard_normal((N, N), dtype=np.float32)
    fixture = {"generator": "internal/xlaext/testdata/gen_triton.py", "jax": jax.__version__, "device": str(jax.devices()[0]), "kernels": []}
    for case, f in cases.items():
        jf = jax.jit(f)
        want = np.asarray(jf(x, y))
        ref = x + y if case == "add" else x @ y
        print(case, "Pallas vs numpy max err", float(np.abs(want - ref).max()))
        cfg, api, other = lowered_triton_call(jf.lower(x, y).as_text(), 2, case)
        print(case, "name", cfg["name"], "grid", [cfg["grid_x"], cfg["grid_y"], cfg["grid_z"]], "warps", cfg["num_warps"],
              "stages", cfg["num_stages"], "ir bytes", len(cfg["ir"]), "api_version", api, "other keys", other)
        fixture["kernels"].append({
            "case": case, "name": cfg["name"].decode(), "ir": base64.b64encode(cfg["ir"]).decode(),
            "grid": [cfg["grid_x"], cfg["grid_y"], cfg["grid_z"]], "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
            "debug": cfg.get("debug", False), "other_config_keys": other, "jax_api_version": api,
            "inputs": [array(x), array(y)], "outputs": [array(want)]})
    with open(out, "w") as fh: json.dump(fixture, fh, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    main()
