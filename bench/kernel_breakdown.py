#!/usr/bin/env python3
"""Where the time of one DiT forward goes, per kernel category, for the Go/XLA bench and for torch.

Inputs (each given as PATH or PATH@WALL_MS, WALL_MS the forward's wall time measured outside the
profiler, e.g. the timed median the tools print beside their profile):

  --ncu PATH    ncu CSV of `examples/bench ... -profile-window TAG` run under
                `ncu --profile-from-start off --metrics gpu__time_duration.sum`, exported with
                `ncu --import REP --csv --page raw` (one row per kernel, a units row under the
                header) or the default details page (one row per kernel and metric: "Kernel Name",
                "Metric Name", "Metric Unit", "Metric Value"). Lines that are not CSV records
                (==PROF== messages, the bench's own output) are skipped; values may carry thousands
                separators; units ns/nsecond, us/usecond, ms/msecond, s/second.
  --torch PATH  `bench/h3_dit_torch.py --profile PATH` (columns name, calls, total_us).
  --trace PATH  bench/kerneltrace.c's CSV (one row per kernel: name, start_ns, end_ns, duration_ns,
                ...) of the same -profile-window, recorded with CUPTI inside the bench itself: the
                kernels ran as they do unprofiled (concurrently, no replay); the table adds the
                window's span, first kernel start to last kernel end. Kernels on different
                streams may overlap, so their sum can exceed the span (and the gap go negative).

For each source it prints one table: kernel launches and summed kernel ms per category (GEMM,
attention, elementwise/fusion, copy/transpose/gather, other), their share of the forward (of WALL_MS
when given, else of the kernel sum), and the gap = WALL_MS minus the summed kernel time: launch
gaps, host work and synchronization between the block executions. ncu serializes kernels and, with
--clock-control none --cache-control none, times each as it would run alone with warm caches; the
profiled forward's own wall time is meaningless under ncu, hence WALL_MS from the timed runs.
`--self-test` checks the parsers and the categories on canned rows (no torch, no GPU).

Optimized HLO of one joint block (what XLA fused, which GEMMs went to cuBLAS, whether attention is
one cuDNN call):

  XLA_FLAGS="--xla_dump_to=$OUT/hlo --xla_dump_hlo_as_text" .gpu/bench -what h3dit ... -iters 3
  python3 bench/hlo_summary.py $OUT/hlo            # finds *joint_block*after_optimizations.txt

XLA writes module_NNNN.<name>.before_optimizations.txt and ...gpu_after_optimizations.txt (plus
buffer assignments) per compiled module; --xla_dump_hlo_module_re=joint_block keeps only the block,
--xla_dump_hlo_pass_re=REGEX adds a file after every matching pass (large: leave it out unless a
pass is under suspicion). In the after-optimizations text look at: the number of `fusion` calls and
their kind (kLoop/kInput: elementwise and reductions, each one HBM round trip; kCustom with
"__triton_gemm"/"__cublas" backend configs: GEMMs), `custom-call` targets (__cublas$gemm,
__cublas$lt$matmul, __cudnn$fmha...: library GEMMs and fused attention), and copies/transposes
left between them. hlo_summary.py counts these and lists each fusion's root op.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import unittest

# Order matters: the first matching category wins (cuDNN/cutlass attention kernels also say "gemm"
# or "cutlass"; XLA calls its GEMM fusions "gemm_fusion_..." or "triton_gemm_...").
CATEGORIES = [
    ("attention", re.compile(r"flash|fmha|sdpa|attention|attn", re.I)),
    ("GEMM", re.compile(r"gemm|nvjet|xmma|cutlass|cublas|matmul|splitk|triton_tem|triton_mm|"
                        r"(^|_)dot(_|$)|wgmma", re.I)),
    ("copy/transpose/gather", re.compile(r"memcpy|memset|copy|transpose|concatenate|gather|scatter|"
                                         r"index|slice|cat_", re.I)),
    ("elementwise/fusion", re.compile(r"fusion|^loop_|^input_|^wrapped_|triton_|elementwise|reduce_|_reduc|"
                                      r"reduction|norm|softmax|silu|sigmoid|add|mul|exp|convert", re.I)),
]
OTHER = "other"
UNIT_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
           "s": 1e6, "second": 1e6}
TIME_METRICS = ("gpu__time_duration.sum", "Duration")


def category(name: str) -> str:
    for cat, pattern in CATEGORIES:
        if pattern.search(name):
            return cat
    return OTHER


def to_us(value: str, unit: str) -> float:
    unit = unit.strip()
    if unit not in UNIT_US:
        raise ValueError(f"unknown time unit {unit!r}; expected one of {sorted(UNIT_US)}")
    return float(value.replace(",", "").strip()) * UNIT_US[unit]


def csv_records(text: str) -> list[list[str]]:
    """The CSV records of a file that may hold other lines too (ncu's and the application's)."""
    return list(csv.reader(io.StringIO("\n".join(l for l in text.splitlines() if l.startswith('"')))))


def parse_ncu(text: str) -> dict[str, list[float]]:
    """ncu CSV (raw or details page) -> {kernel name: [launches, total us]}."""
    recs = csv_records(text)
    if not recs:
        raise ValueError("no CSV records (did ncu profile anything? was cuProfilerStart reached?)")
    head = recs[0]
    table: dict[str, list[float]] = {}

    def add(name, us):
        row = table.setdefault(name, [0, 0.0])
        row[0] += 1
        row[1] += us

    name_col = head.index("Kernel Name")
    if "Metric Name" in head:
        m, u, v = head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
        for r in recs[1:]:
            if r[m] in TIME_METRICS:
                add(r[name_col], to_us(r[v], r[u]))
        return table
    col = next((head.index(t) for t in TIME_METRICS if t in head), None)
    if col is None:
        raise ValueError(f"no time column ({' or '.join(TIME_METRICS)}) in the ncu header")
    rows = recs[1:]
    unit = "nsecond"
    if rows and rows[0][0] == "":  # the raw page's units row
        unit, rows = rows[0][col], rows[1:]
    for r in rows:
        add(r[name_col], to_us(r[col], unit))
    return table


def parse_trace(text: str) -> dict[str, list[float]]:
    """kerneltrace.c CSV -> {kernel name: [launches, total us]}."""
    table: dict[str, list[float]] = {}
    for r in csv.DictReader(io.StringIO(text)):
        row = table.setdefault(r["name"], [0, 0.0])
        row[0] += 1
        row[1] += int(r["duration_ns"]) / 1000
    if not table:
        raise ValueError("no kernel rows (was the tracer's window reached? see the bench log's kerneltrace: lines)")
    return table


def trace_span_ms(text: str) -> float:
    """The window's GPU span in a kerneltrace.c CSV: first kernel start to last kernel end."""
    rows = list(csv.DictReader(io.StringIO(text)))
    return (max(int(r["end_ns"]) for r in rows) - min(int(r["start_ns"]) for r in rows)) / 1e6


def parse_torch(text: str) -> dict[str, list[float]]:
    """h3_dit_torch.py --profile CSV -> {kernel name: [calls, total us]}."""
    return {r["name"]: [int(r["calls"]), float(r["total_us"])] for r in csv.DictReader(io.StringIO(text))}


def breakdown(table: dict[str, list[float]], wall_ms: float | None) -> list[tuple[str, int, float, float]]:
    """Rows (category, launches, ms, share of the forward in %), then the kernel sum and the gap."""
    sums = {cat: [0, 0.0] for cat, _ in CATEGORIES}
    sums[OTHER] = [0, 0.0]
    for name, (calls, us) in table.items():
        s = sums[category(name)]
        s[0] += calls
        s[1] += us / 1000
    kernels_ms = sum(s[1] for s in sums.values())
    base = wall_ms if wall_ms else kernels_ms
    rows = [(cat, int(n), ms, 100 * ms / base if base else 0.0) for cat, (n, ms) in sums.items()]
    rows.append(("kernels summed", sum(r[1] for r in rows), kernels_ms, 100 * kernels_ms / base if base else 0.0))
    if wall_ms:
        rows.append(("gap (wall - kernels)", 0, wall_ms - kernels_ms, 100 * (wall_ms - kernels_ms) / wall_ms))
    return rows


def report(label: str, table: dict[str, list[float]], wall_ms: float | None, top: int) -> str:
    out = [f"== {label}: " + (f"forward wall {wall_ms:.1f} ms" if wall_ms else "no wall time given: shares of the kernel sum")]
    out.append(f"{'category':<24}{'launches':>9}{'ms':>11}{'share %':>9}")
    for cat, n, ms, share in breakdown(table, wall_ms):
        out.append(f"{cat:<24}{n if n else '':>9}{ms:>11.2f}{share:>9.1f}")
    out.append(f"top {top} kernels:")
    for name, (calls, us) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        out.append(f"  {us / 1000:9.2f} ms {int(calls):6d}x  [{category(name)}] {short}")
    return "\n".join(out)


def source(arg: str) -> tuple[str, float | None]:
    path, _, wall = arg.partition("@")
    return path, float(wall) if wall else None


class SelfTest(unittest.TestCase):
    def test_details_page(self):
        text = "\n".join([
            "==PROF== Connected to process 7 (/x/.gpu/bench)",
            "h3dit[adaln cached]: forward median 0.800 s",
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
            '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
            '"0","7","bench","h","nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT","1","13","(384, 1, 1)","(132, 1, 1)",'
            '"0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1,250.5"',
            '"1","7","bench","h","loop_multiply_fusion","1","13","(128, 1, 1)","(9000, 1, 1)",'
            '"0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","40"',
            '"2","7","bench","h","loop_multiply_fusion","1","13","(128, 1, 1)","(9000, 1, 1)",'
            '"0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","60,000"',
        ])
        t = parse_ncu(text)
        self.assertEqual(t["loop_multiply_fusion"], [2, 100.0])
        self.assertAlmostEqual(t["nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT"][1], 1250500.0)

    def test_raw_page_with_units_row(self):
        text = "\n".join([
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
            '"Grid Size","Device","CC","gpu__time_duration.sum"',
            '"","","","","","","","","","","","nsecond"',
            '"0","7","bench","h","cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7",'
            '"1","13","(384, 1, 1)","(117, 56, 1)","0","9.0","2,000,000"',
            '"1","7","bench","h","input_reduce_fusion","1","13","(256, 1, 1)","(14937, 1, 1)","0","9.0","500"',
        ])
        t = parse_ncu(text)
        rows = {r[0]: r for r in breakdown(t, 4.0)}
        self.assertAlmostEqual(rows["attention"][2], 2.0)
        self.assertAlmostEqual(rows["elementwise/fusion"][2], 0.0005)
        self.assertAlmostEqual(rows["gap (wall - kernels)"][2], 4.0 - 2.0005)
        self.assertAlmostEqual(rows["attention"][3], 50.0)

    def test_torch_table_and_categories(self):
        t = parse_torch("name,calls,total_us\n"
                        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params),2,300.0\n"
                        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1,8,900\n"
                        "triton_poi_fused_add_mul_rms_norm_0,4,50\n"
                        "Memcpy HtoD (Pageable -> Device),1,10\n"
                        "ncclDevKernel_AllReduce,1,5\n")
        rows = {r[0]: r for r in breakdown(t, None)}
        self.assertEqual(rows["GEMM"][1:3], (8, 0.9))
        self.assertEqual(rows["attention"][1], 2)
        self.assertEqual(rows["elementwise/fusion"][1], 4)
        self.assertEqual(rows["copy/transpose/gather"][1], 1)
        self.assertEqual(rows[OTHER][1], 1)
        self.assertAlmostEqual(rows["kernels summed"][3], 100.0)
        self.assertNotIn("gap (wall - kernels)", rows)
        for name, cat in [("gemm_fusion_dot_general_3", "GEMM"), ("triton_gemm_dot_12", "GEMM"),
                          ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
                          ("loop_transpose_fusion_2", "copy/transpose/gather"),
                          ("wrapped_convert", "elementwise/fusion")]:
            self.assertEqual(category(name), cat, name)

    def test_trace_csv(self):
        text = ("name,start_ns,end_ns,duration_ns,device,stream,correlation,grid_x,grid_y,grid_z,block_x,block_y,block_z\n"
                '"nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT",1000,301000,300000,0,13,5,132,1,1,384,1,1\n'
                '"loop_multiply_fusion",302000,342000,40000,0,13,6,9000,1,1,128,1,1\n'
                '"loop_multiply_fusion",343000,403000,60000,0,14,7,9000,1,1,128,1,1\n'
                '"void cutlass::Kernel<fmha::Attention<bf16, 64, 128>>(fmha::Params, int)",404000,1004000,600000,0,13,8,56,4,1,128,1,1\n')
        t = parse_trace(text)
        self.assertEqual(t["loop_multiply_fusion"], [2, 100.0])
        self.assertAlmostEqual(trace_span_ms(text), 1.003)
        rows = {r[0]: r for r in breakdown(t, 2.0)}
        self.assertAlmostEqual(rows["GEMM"][2], 0.3)
        self.assertEqual(rows["attention"][1], 1)
        self.assertAlmostEqual(rows["kernels summed"][2], 1.0)
        self.assertAlmostEqual(rows["gap (wall - kernels)"][3], 50.0)
        with self.assertRaises(ValueError):
            parse_trace(text.splitlines()[0] + "\n")

    def test_bad_unit_fails(self):
        with self.assertRaises(ValueError):
            to_us("1", "cycle")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", action="append", default=[], metavar="PATH[@WALL_MS]")
    ap.add_argument("--torch", action="append", default=[], metavar="PATH[@WALL_MS]")
    ap.add_argument("--trace", action="append", default=[], metavar="PATH[@WALL_MS]")
    ap.add_argument("--top", type=int, default=12, help="kernels listed per source")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        res = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest))
        return 0 if res.wasSuccessful() else 1
    if not args.ncu and not args.torch and not args.trace:
        ap.error("give --trace, --ncu and/or --torch files (or --self-test)")
    for kind, parse, items in (("trace", parse_trace, args.trace), ("ncu", parse_ncu, args.ncu),
                               ("torch", parse_torch, args.torch)):
        for item in items:
            path, wall = source(item)
            with open(path) as f:
                text = f.read()
            table, label = parse(text), f"{kind} {path}"
            if kind == "trace":
                label += f" (kernels span {trace_span_ms(text):.1f} ms of GPU time)"
            print(report(label, table, wall, args.top) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
