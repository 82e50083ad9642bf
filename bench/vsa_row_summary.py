# Issue 32's acceptance lines from the logs bench/vsa_row.sh leaves in OUT (unpack its logs.tgz there first),
# one row a line, with the figures it rests on and whether it holds there; lines whose logs are missing or
# unreadable say so.
#
#   python3 bench/vsa_row_summary.py OUT
#   python3 bench/vsa_row_summary.py --self-test     # the parsers on canned lines in the logs' formats
import argparse, csv, io, json, os, re, sys, tempfile

FINE_GEOMETRIES = {"h3": "the issue's H3 (234 whole tiles, 23 a row)", "wan0.8": "Wan 1.3B 0.8 (512 whole tiles, 103 a row)"}
# -vsa-geometry: what it is, and the line on it
VSA_GEOMETRIES = {
    "h3-packed": ("the issue's H3, 234 whole tiles, 0.9", "<= 3.0 ms"),
    "h3": ("FastH3's tiling, 289 tiles, 0.9", "<= 3.0 ms"),
    "wan-packed": ("the issue's Wan 1.3B, 512 whole tiles, 0.8", ">= 2.5x dense"),
    "wan": ("FastWan's tiling, 624 tiles, 0.8", ">= 2.5x dense"),
}


def read(out, name):
    try:
        with open(os.path.join(out, name), errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def fine_medians(text):
    # vsa_fine_variants.py's result lines: "LABEL NAME r1 / r2 / r3  median X ms (...)".
    found = {}
    for m in re.finditer(r"^(\S+) (\S+)\s+[0-9. /]+median ([0-9.]+) ms", text, re.M):
        found[(m.group(1), m.group(2))] = float(m.group(3))
    return found


def vsa_medians(text):
    # bench -what vsa: "vsa[LABEL]: first ... s, min X ms, median Y ms over ...", LABEL dense or "vsa S KERNEL".
    found = {}
    for m in re.finditer(r"^vsa\[([^\]]+)\]: first [0-9.]+ s, min [0-9.]+ ms, median ([0-9.]+) ms", text, re.M):
        label = m.group(1)
        found["dense" if label == "dense" else label.split()[-1]] = float(m.group(2))
    return found


def forward_medians(text):
    # bench -what h3dit: "h3dit[TAG]: forward min X s, median Y s over N runs; ..."
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^h3dit\[([^\]]+)\]: forward min [0-9.]+ s, median ([0-9.]+) s", text, re.M)}


def denoise_medians(text):
    # bench -what wandit: "wandit: FastWan denoise[ [VSA sparsity S]] [t ...] (...): total min X s, median Y s over ..."
    found = {}
    for m in re.finditer(r"^wandit: FastWan denoise( \[VSA sparsity [0-9.]+\])? \[[^\]]*\].*?median ([0-9.]+) s over", text, re.M):
        found["vsa" if m.group(1) else "dense"] = float(m.group(2))
    return found


def fine_kernel_calls(text):
    # kerneltrace.c's CSV: the fine kernel's (vsa_fwd, attention/vsa_triton.json's name) calls and mean ms.
    ms = [int(r["duration_ns"]) / 1e6 for r in csv.DictReader(io.StringIO(text)) if r.get("name", "").startswith("vsa_fwd")]
    return len(ms), (sum(ms) / len(ms) if ms else 0.0)


def clip_records(text, prefix="clip record: "):
    # bench -what clip's and the PyTorch chains' one-line JSON records (bench/clipkit.py writes the same keys).
    found = []
    for line in text.splitlines():
        if line.startswith(prefix):
            try:
                found.append(json.loads(line[len(prefix):]))
            except ValueError:
                pass
    return found


def parity(text):
    # go test -v: the top-level tests' results and the binary's verdict.
    passed = len(re.findall(r"^--- PASS: ", text, re.M))
    failed = re.findall(r"^--- FAIL: (\S+)", text, re.M)
    skipped = len(re.findall(r"^--- SKIP: ", text, re.M))
    verdict = "PASS" if re.search(r"^PASS$", text, re.M) and not failed else "FAIL"
    return verdict, passed, failed, skipped


def summarize(out):
    rows = []
    gpu = (read(out, "gpu.txt") or "device not recorded").strip().splitlines()
    rows.append(("device", gpu[0] if gpu else "device not recorded", ""))
    text = read(out, "parity.log")
    if text is None:
        rows.append(("GPU parity", "no parity.log", "not run"))
    else:
        verdict, passed, failed, skipped = parity(text)
        rows.append(("GPU parity (attention.test -test.run OnGPU)",
                     f"{passed} passed, {len(failed)} failed{' (' + ', '.join(failed) + ')' if failed else ''}, {skipped} skipped",
                     "holds" if verdict == "PASS" and passed > 0 else "does not hold"))
    fine = fine_medians(read(out, "fine.log") or "")
    for label, what in FINE_GEOMETRIES.items():
        ours, theirs = fine.get((label, "base")), fine.get((label, "upstream"))
        if ours is None or theirs is None:
            rows.append((f"fine stage <= upstream's, {what}", "missing in fine.log", "not measured"))
            continue
        rows.append((f"fine stage <= upstream's, {what}", f"ours {ours:.3f} ms, upstream's {theirs:.3f} ms ({ours / theirs:.3f}x)",
                     "holds" if ours <= theirs else "does not hold"))
    for geo, (what, line) in VSA_GEOMETRIES.items():
        v = vsa_medians(read(out, f"vsa_{geo}.log") or "")
        if "dense" not in v or "triton" not in v:
            rows.append((f"whole VSA {line}, {what}", f"missing in vsa_{geo}.log", "not measured"))
            continue
        ratio = v["dense"] / v["triton"]
        ok = v["triton"] <= 3.0 if line.startswith("<=") else ratio >= 2.5
        gather = f", gather path {v['gather']:.2f} ms" if "gather" in v else ""
        gather += f", with the Mosaic fine stage {v['mosaic']:.3f} ms ({v['dense'] / v['mosaic']:.2f}x)" if "mosaic" in v else ""
        rows.append((f"whole VSA {line}, {what}", f"{v['triton']:.3f} ms, dense {v['dense']:.2f} ms ({ratio:.2f}x){gather}",
                     "holds" if ok else "does not hold"))
    f = forward_medians(read(out, "h3dit.log") or "")
    vsa = next((t for t in f if t.startswith("vsa")), None)
    if vsa is None:
        rows.append(("FastH3 DiT forward, VSA 0.9, <= 1.10 s", "missing in h3dit.log", "not measured"))
    else:
        dense = f.get("adaln cached")
        torch = re.search(r"^forward min [0-9.]+ s, median ([0-9.]+) s", read(out, "h3dit_torch.log") or "", re.M)
        versus = (f"; PyTorch on upstream's fine kernel (torch.compile) {float(torch.group(1)):.3f} s "
                  f"({float(torch.group(1)) / f[vsa]:.2f}x)") if torch else ""
        rows.append(("FastH3 DiT forward, VSA 0.9, <= 1.10 s", f"{f[vsa]:.3f} s" + (f", dense {dense:.3f} s" if dense else "") + versus,
                     "holds" if f[vsa] <= 1.10 else "does not hold"))
    name = "FastH3 with default flags, whole clip warm, <= 7 s"
    warm = [r for r in clip_records(read(out, "h3_clip.log") or "") if r.get("variant") == "default" and not r.get("cold")]
    if not warm:
        rows.append((name, "missing in h3_clip.log", "not measured"))
    else:
        r = warm[-1]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r.get("stages_s", {}).items() if k in ("denoise", "decode", "mux"))
        torch = [t for t in clip_records(read(out, "h3_torch.log") or "", "torch clip record: ") if not t.get("cold")]
        versus = f"; PyTorch chain {torch[-1]['total_s']:.2f} s ({torch[-1]['total_s'] / r['total_s']:.2f}x)" if torch else ""
        rows.append((name, f"{r['total_s']:.2f} s ({stages}){versus}", "holds" if r["total_s"] <= 7.0 else "does not hold"))
    d = denoise_medians(read(out, "wandit.log") or "")
    if "vsa" not in d:
        rows.append(("FastWan 1.3B 3-step denoise, VSA, <= 1.0 s", "missing in wandit.log", "not measured"))
    else:
        rows.append(("FastWan 1.3B 3-step denoise, VSA, <= 1.0 s", f"{d['vsa']:.3f} s" + (f", dense {d['dense']:.3f} s" if "dense" in d else ""),
                     "holds" if d["vsa"] <= 1.0 else "does not hold"))
    # How the DiTs' own routing (random weights) loads the fine kernel against uniform lists at the same tiling:
    # above 1, their rows are not flattered by routing to small tiles (BENCHMARKS.md, "Session 26"). The DiTs'
    # calls also add the gate in their epilogue, which the variants bench's do not: a few per cent.
    for trace, label, what in (("trace_h3.csv", "h3_tiling", "FastH3"), ("trace_wan.csv", "wan_tiling", "FastWan")):
        calls, mean = fine_kernel_calls(read(out, trace) or "")
        uniform = fine.get((label, "base"))
        name = f"{what} DiT's routing against uniform lists (fine kernel a call; no acceptance line)"
        if not calls or uniform is None:
            rows.append((name, f"missing in {trace} or fine.log", "not measured"))
            continue
        rows.append((name, f"{mean:.3f} ms over {calls} calls, uniform lists {uniform:.3f} ms ({mean / uniform:.2f}x)", "information"))
    return rows


def print_table(rows):
    print("| issue 32's line | measured | verdict |")
    print("|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


CANNED = {
    "gpu.txt": "NVIDIA H200, 143771 MiB, 1980 MHz, 580.65\n",
    "parity.log": "=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\n--- SKIP: TestB (0.00s)\n--- PASS: TestC (1.00s)\nPASS\n",
    "fine.log": ("h3 base: max diff from upstream 0.00195\n"
                 "h3 upstream    1.776 / 1.795 / 1.795  median 1.795 ms (620 TFLOP/s)\n"
                 "h3 base        1.766 / 1.862 / 1.882  median 1.862 ms (598 TFLOP/s)\n"
                 "wan0.8 upstream 3.543 / 3.541 / 3.514  median 3.541 ms (600 TFLOP/s)\n"
                 "wan0.8 base     3.400 / 3.450 / 3.430  median 3.430 ms (620 TFLOP/s)\n"
                 "h3_tiling base  3.000 / 3.050 / 3.100  median 3.050 ms (400 TFLOP/s)\n"),
    "vsa_h3-packed.log": ("vsa[dense]: first 1.234 s, min 10.100 ms, median 10.300 ms over 10 (a program of 4 chained attentions over 4; "
                          "first is the program's); 6.4 TFLOP -> 620 TFLOP/s; output sum 1.2; peak device 100 MiB\n"
                          "vsa[vsa 0.9 gather]: first 3.1 s, min 17.000 ms, median 17.100 ms over 10; 0.7 TFLOP -> 40 TFLOP/s; output sum 1; peak device 1 MiB\n"
                          "vsa[vsa 0.9 triton]: first 1.1 s, min 2.400 ms, median 2.500 ms over 10; 0.7 TFLOP -> 280 TFLOP/s; output sum 1; peak device 1 MiB\n"),
    "vsa_wan.log": ("vsa[dense]: first 1.2 s, min 11.3 ms, median 11.400 ms over 10; 6 TFLOP -> 500 TFLOP/s; output sum 1; peak device 1 MiB\n"
                    "vsa[vsa 0.8 triton]: first 1.1 s, min 4.8 ms, median 4.900 ms over 10; 1 TFLOP -> 200 TFLOP/s; output sum 1; peak device 1 MiB\n"),
    "h3dit.log": ("h3dit[adaln per step]: forward min 1.550 s, median 1.560 s over 3 runs; 895.5 TFLOP -> 574 TFLOP/s (73% of 790)\n"
                  "h3dit[adaln cached]: forward min 1.520 s, median 1.525 s over 3 runs; 895.5 TFLOP -> 587 TFLOP/s (74% of 790)\n"
                  "h3dit[vsa 0.9 E64]: forward min 1.170 s, median 1.180 s over 3 runs; 600.1 TFLOP -> 508 TFLOP/s (64% of 790)\n"),
    "h3dit_torch.log": ("VSA attention against bench/vsa_torch.py's: max abs diff 0.00195 of 0.432\n"
                        "first forward 11.91 s (includes compile/autotune with --compile)\n"
                        "forward min 1.264 s, median 1.298 s over 3 runs; 693.0 TFLOP -> 534 TFLOP/s (68% of 790)\n"),
    "h3_clip.log": ("clip: fasth3 opened in 2.10 s on xla:cuda (bf16)\n"
                    'clip record: {"model":"fasth3","variant":"default","call":1,"cold":true,"total_s":36.2,"stages_s":{"denoise":24.7}}\n'
                    'clip record: {"model":"fasth3","variant":"default","call":2,"cold":false,"total_s":6.95,'
                    '"stages_s":{"condition":0.004,"decode":1.7,"denoise":4.85,"mux":0.4,"validate":0.0002}}\n'
                    'clip record: {"model":"fasth3","variant":"dense","call":2,"cold":false,"total_s":8.1}\n'),
    "h3_torch.log": ('torch clip record: {"model": "torch:fasth3", "call": 1, "cold": true, "total_s": 30.0}\n'
                     'torch clip record: {"model": "torch:fasth3", "call": 2, "cold": false, "total_s": 11.12}\n'),
    "trace_h3.csv": ("name,start_ns,end_ns,duration_ns\nvsa_fwd,0,3000000,3000000\nvsa_pack,0,1,170000\nvsa_fwd,5,3200005,3200000\n"),
    "wandit.log": ("wandit: FastWan denoise [1000 757 522] (sigma [1 0.9 0.8], no CFG): total min 1.560 s, median 1.570 s over 3 runs (0.523 s per step); 1 TFLOP -> 1 TFLOP/s (1% of 790); x0 rms 1.0, non-finite 0\n"
                   "wandit: FastWan denoise [VSA sparsity 0.8] [1000 757 522] (sigma [1 0.9 0.8], no CFG): total min 0.950 s, median 0.958 s over 3 runs (0.319 s per step); 1 TFLOP -> 1 TFLOP/s (1% of 790); x0 rms 1.0, non-finite 0\n"),
}


def self_test():
    with tempfile.TemporaryDirectory() as out:
        for name, text in CANNED.items():
            with open(os.path.join(out, name), "w") as fh:
                fh.write(text)
        rows = {r[0]: r[1:] for r in summarize(out)}
    want = {
        "GPU parity (attention.test -test.run OnGPU)": ("2 passed, 0 failed, 1 skipped", "holds"),
        "fine stage <= upstream's, the issue's H3 (234 whole tiles, 23 a row)": ("ours 1.862 ms, upstream's 1.795 ms (1.037x)", "does not hold"),
        "fine stage <= upstream's, Wan 1.3B 0.8 (512 whole tiles, 103 a row)": ("ours 3.430 ms, upstream's 3.541 ms (0.969x)", "holds"),
        "whole VSA <= 3.0 ms, the issue's H3, 234 whole tiles, 0.9": ("2.500 ms, dense 10.30 ms (4.12x), gather path 17.10 ms", "holds"),
        "whole VSA <= 3.0 ms, FastH3's tiling, 289 tiles, 0.9": ("missing in vsa_h3.log", "not measured"),
        "whole VSA >= 2.5x dense, FastWan's tiling, 624 tiles, 0.8": ("4.900 ms, dense 11.40 ms (2.33x)", "does not hold"),
        "FastH3 DiT forward, VSA 0.9, <= 1.10 s":
            ("1.180 s, dense 1.525 s; PyTorch on upstream's fine kernel (torch.compile) 1.298 s (1.10x)", "does not hold"),
        "FastWan 1.3B 3-step denoise, VSA, <= 1.0 s": ("0.958 s, dense 1.570 s", "holds"),
        "FastH3 with default flags, whole clip warm, <= 7 s":
            ("6.95 s (decode 1.70, denoise 4.85, mux 0.40); PyTorch chain 11.12 s (1.60x)", "holds"),
        "FastH3 DiT's routing against uniform lists (fine kernel a call; no acceptance line)":
            ("3.100 ms over 2 calls, uniform lists 3.050 ms (1.02x)", "information"),
        "FastWan DiT's routing against uniform lists (fine kernel a call; no acceptance line)":
            ("missing in trace_wan.csv or fine.log", "not measured"),
    }
    bad = [(k, rows.get(k), v) for k, v in want.items() if rows.get(k) != v]
    failing = parity("--- PASS: TestA (0.1s)\n--- FAIL: TestB (0.2s)\nFAIL\n")
    if failing != ("FAIL", 1, ["TestB"], 0):
        bad.append(("a failing parity log", failing, ("FAIL", 1, ["TestB"], 0)))
    for k, got, w in bad:
        print(f"self-test: {k}: got {got}, want {w}")
    print("self-test: " + ("FAILED" if bad else "ok"))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", nargs="?", help="the OUT folder of bench/vsa_row.sh")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(self_test())
    if not args.out:
        ap.error("give the OUT folder of bench/vsa_row.sh (or --self-test)")
    print_table(summarize(args.out))


if __name__ == "__main__":
    main()
