# A Mosaic GPU kernel's module as a template over its geometry, for internal/xlaext.MosaicTemplate.
#
# Why: a Mosaic GPU module (the `mosaic_gpu_v2` call's `module`) is compiled for one geometry: its memref
# types, launch grid and the constants derived from them are in the IR, where a Triton kernel's IR reads its
# geometry from operands. The plugin's handler parses the module with MLIR's parseSourceString, so text
# serves as well as bytecode (bench/mosaic_text_probe.py: equal outputs, bit for bit). Lowered at several
# geometries, a kernel's text keeps its structure and only numbers change, each a formula of the geometry
# (bench/vsa_mosaic_draft.py's kernel: heads, tile rows, tiles, list width and products of them;
# BENCHMARKS.md, session 31). This script finds those formulas and writes the text with a hole at each
# such number; Go fills the holes for the geometry a graph needs.
#
# A formula is floor((coef * prod(params) + add) / div): the product of a subset of the parameters, or 1.
# Each varying number's formula is fitted on all but the last geometry given and must hold at every one,
# the last included, which none of the fits saw. The module's `mosaic_gpu.dump_basename` (a counter of the
# kernels JAX lowered in the process, a name for dump files) is set to "entry" in every text first.
#
# As a library: lowered_text(fn, *shapes) captures the module text of fn's one Mosaic GPU call as JAX's
# lowering serializes it, run_text(fn, text, *args) runs fn with that call's module replaced by text (both
# through JAX's own lowering, on the GPU machine; compile_text gives the compiled call), infer(cases) -> template, instantiate(template, params)
# -> text. As a script, on texts saved from such lowerings:
#
#   python3 internal/xlaext/testdata/mosaic_template.py --out T.json.gz 'H=56,T=234,K=23:draft_h3.mlir' ...
import argparse, gzip, hashlib, itertools, json, re

NUMBER = re.compile(r"-?\d+")
BASENAME = re.compile(r'mosaic_gpu\.dump_basename = "[^"]*"')


_HOOKS = {"captured": [], "replacement": None, "installed": False}


def _install_hooks():
    # Wraps jax/experimental/mosaic/gpu/core.py's serde pass (to keep the module JAX serializes, as text) and
    # the custom call its lowering rule writes (to hand the plugin a given text and its SHA-256 instead).
    if _HOOKS["installed"]:
        return
    import jax.experimental.mosaic.gpu.core as core
    serde, custom_call = core._run_serde_pass, core.mlir.custom_call

    def capture(module, **kw):
        module = serde(module, **kw)
        if kw.get("serialize"):
            _HOOKS["captured"].append(module.operation.get_asm(enable_debug_info=False))
        return module

    def call(*args, **kw):
        text = _HOOKS["replacement"]
        if text is not None and kw.get("call_target_name") == "mosaic_gpu_v2":
            data = text.encode()
            kw["backend_config"] = dict(kw["backend_config"], module=core.ir.StringAttr.get(data),
                                        kernel_hash=core.ir.StringAttr.get(hashlib.sha256(data).digest()))
        return custom_call(*args, **kw)
    core._run_serde_pass, core.mlir.custom_call = capture, call
    _HOOKS["installed"] = True


def lowered_text(fn, *args):
    # The normalized module text of the one Mosaic GPU call in jax.jit(fn)'s lowering at args (shapes do).
    import jax
    _install_hooks()
    before = len(_HOOKS["captured"])
    jax.jit(lambda *a: fn(*a)).lower(*args)  # a new function: a new lowering, not a cached one
    texts = _HOOKS["captured"][before:]
    assert len(texts) == 1, f"{len(texts)} Mosaic GPU modules in one lowering"
    return normalized(texts[0])


def compile_text(fn, text, *args):
    # jax.jit(fn) compiled for args with its Mosaic GPU call's module replaced by text: a callable on args.
    import jax
    _install_hooks()
    _HOOKS["replacement"] = text
    try:
        return jax.jit(lambda *a: fn(*a)).lower(*args).compile()
    finally:
        _HOOKS["replacement"] = None


def run_text(fn, text, *args):
    # fn's result at args with its Mosaic GPU call's module replaced by text.
    import jax
    return jax.block_until_ready(compile_text(fn, text, *args)(*args))


def normalized(text):
    return BASENAME.sub('mosaic_gpu.dump_basename = "entry"', text)


def evaluate(formula, params):
    prod = 1
    for name in formula["params"]:
        prod *= params[name]
    return (formula["coef"] * prod + formula["add"]) // formula["div"]


def fit(values, cases, names):
    # The simplest formula giving values at every case: fewest parameters, then the smallest divisor and
    # offset; fitted on all cases but the last, which must agree as well.
    seen = cases[:-1]
    for k in range(1, len(names) + 1):
        for subset in itertools.combinations(names, k):
            prods = [evaluate({"params": subset, "coef": 1, "add": 0, "div": 1}, c) for c in cases]
            for div in (1, 2, 4, 8, 16, 32, 64, 128):
                pairs = [(p, v) for p, v in zip(prods[:len(seen)], values[:len(seen)])]
                (p1, v1), (p2, v2) = pairs[0], next(((p, v) for p, v in pairs[1:] if p != pairs[0][0]), (None, None))
                if p2 is None:
                    continue
                # coef·(p1 − p2) = div·(v1 − v2) + (r1 − r2), the r the remainders of the two floors.
                for dr in range(1 - div, div):
                    num = div * (v1 - v2) + dr
                    if num % (p1 - p2):
                        continue
                    coef = num // (p1 - p2)
                    for r in range(div):
                        add = div * v1 + r - coef * p1
                        f = {"params": list(subset), "coef": coef, "add": add, "div": div}
                        if coef != 0 and all(evaluate(f, c) == v for c, v in zip(cases, values)):
                            return f
    return None


def infer(cases):
    # cases: [(params dict, module text)], the last held out of every fit. Returns the template:
    # {"params", "pieces", "holes", "formulas", "checks"}: the text is pieces[0] + str(formulas[holes[0]]
    # evaluated) + pieces[1] + ...; checks are each case's params and the SHA-256 of its normalized text.
    names = sorted(cases[0][0])
    texts = [normalized(t) for _, t in cases]
    params = [p for p, _ in cases]
    skeletons = [NUMBER.sub("#", t) for t in texts]
    if any(s != skeletons[0] for s in skeletons[1:]):
        line = next(i for i, ls in enumerate(zip(*(s.splitlines() for s in skeletons))) if len(set(ls)) > 1)
        raise ValueError(f"the texts differ in more than numbers (line {line + 1})")
    numbers = [[(m.start(), m.end(), int(m.group())) for m in NUMBER.finditer(t)] for t in texts]
    pieces, holes, formulas, keys, at = [], [], [], {}, 0
    for i, spans in enumerate(zip(*numbers)):
        values = [v for _, _, v in spans]
        if len(set(values)) == 1:
            continue
        f = fit(values, params, names)
        if f is None:
            raise ValueError(f"no formula of {names} gives {values} (number {i}, text at {spans[0][0]})")
        key = json.dumps(f, sort_keys=True)
        if key not in keys:
            keys[key] = len(formulas)
            formulas.append(f)
        start, end, _ = spans[0]
        pieces.append(texts[0][at:start])
        holes.append(keys[key])
        at = end
    pieces.append(texts[0][at:])
    template = {"params": names, "pieces": pieces, "holes": holes, "formulas": formulas,
                "checks": [{"params": p, "sha256": hashlib.sha256(t.encode()).hexdigest()} for p, t in zip(params, texts)]}
    for p, t in zip(params, texts):
        assert instantiate(template, p) == t, f"the template does not give the text at {p}"
    return template


def instantiate(template, params):
    out = [template["pieces"][0]]
    for hole, piece in zip(template["holes"], template["pieces"][1:]):
        out += [str(evaluate(template["formulas"][hole], params)), piece]
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="the template, gzipped JSON")
    ap.add_argument("cases", nargs="+", help="NAME=VALUE,...:FILE, the last held out of the fits")
    args = ap.parse_args()
    cases = []
    for case in args.cases:
        spec, path = case.split(":", 1)
        params = {k: int(v) for k, v in (kv.split("=") for kv in spec.split(","))}
        with open(path) as fh:
            cases.append((params, fh.read()))
    template = infer(cases)
    for f in template["formulas"]:
        print("formula", f)
    print(f"{len(template['holes'])} holes, {len(template['formulas'])} formulas; checks", [c["params"] for c in template["checks"]])
    with gzip.open(args.out, "wt") as fh:
        json.dump(template, fh)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
