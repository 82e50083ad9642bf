#!/usr/bin/env python3
"""Summarize XLA's optimized HLO of one module (default: the H3 joint block) from an XLA dump folder.

  XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text" .gpu/bench -what h3dit ...
  python3 bench/hlo_summary.py DIR [--module joint_block]

Reads every DIR/**/module_*.<name>...after_optimizations.txt whose file name or `HloModule` name
matches --module, and prints: the executed fusions by kind (kLoop/kInput elementwise and reduction
kernels; kCustom with their backend kind, e.g. __triton_gemm), the custom-calls by target
(__cublas$gemm, __cublas$lt$matmul, __cudnn$fmha...), the other executed instructions (copies,
transposes left unfused), and one line per fusion with its root op and main ops, so a block reads
as "14 loop fusions, 7 GEMMs, 1 attention call". See bench/kernel_breakdown.py for the profiling
side. With no module matching it lists the modules found. `--self-test` runs on a canned module.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import unittest

COMP_START = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\(")
CALLS = re.compile(r"calls=%?([\w.\-]+)")
KIND = re.compile(r"kind=(k\w+)")
BACKEND_KIND = re.compile(r'"kind":"([^"]+)"')
TARGET = re.compile(r'custom_call_target="([^"]+)"')
# Instructions that launch nothing (or only alias buffers) when left outside a fusion.
FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}


def parse(text: str) -> dict[str, list[tuple[str, str, str, bool]]]:
    """HLO text -> {computation: [(instruction, opcode, full line, is_root)]}; ENTRY is named "ENTRY"."""
    comps: dict[str, list] = {}
    cur = None
    for line in text.splitlines():
        if cur is None:
            m = COMP_START.match(line)
            if m and not line.startswith("HloModule"):
                cur = "ENTRY" if m.group(1) else m.group(2)
                comps[cur] = []
            continue
        if line.startswith("}"):
            cur = None
            continue
        m = INSTR.match(line)
        if m:
            comps[cur].append((m.group(2), m.group(3), line, bool(m.group(1))))
    return comps


def summarize(text: str) -> list[str]:
    comps = parse(text)
    fused = {c for instrs in comps.values() for _, op, line, _ in instrs if op == "fusion"
             for c in CALLS.findall(line)}
    kinds, targets, loose, fusions = collections.Counter(), collections.Counter(), collections.Counter(), []
    for comp, instrs in comps.items():
        if comp in fused:
            continue
        for name, op, line, _ in instrs:
            if op == "fusion":
                kind = KIND.search(line).group(1) if KIND.search(line) else "?"
                bk = BACKEND_KIND.search(line)
                label = f"{kind} {bk.group(1)}" if kind == "kCustom" and bk else kind
                kinds[label] += 1
                callee = CALLS.search(line).group(1) if CALLS.search(line) else ""
                fusions.append((name, label, comps.get(callee, [])))
            elif op == "custom-call":
                t = TARGET.search(line)
                targets[t.group(1) if t else "?"] += 1
            elif op not in FREE and comp == "ENTRY":
                loose[op] += 1
    out = [f"fusions: {sum(kinds.values())} (" + ", ".join(f"{n} {k}" for k, n in kinds.most_common()) + ")",
           f"custom-calls: {sum(targets.values())} (" + ", ".join(f"{n} {k}" for k, n in targets.most_common()) + ")",
           "other executed instructions: " + (", ".join(f"{n} {k}" for k, n in loose.most_common()) or "none")]
    for name, label, body in fusions:
        root = next((op for _, op, _, r in body if r), "?")
        ops = collections.Counter(op for _, op, _, _ in body if op not in FREE | {"broadcast", "convert"})
        main = ", ".join(f"{op}x{n}" if n > 1 else op for op, n in ops.most_common(5))
        out.append(f"  {name:<28} {label:<22} root {root:<14} {main}")
    return out


def modules(folder: str) -> list[tuple[str, str]]:
    """(path, HloModule name) of every optimized module dumped under folder."""
    found = []
    for path in sorted(glob.glob(os.path.join(folder, "**", "*after_optimizations.txt"), recursive=True)):
        with open(path) as f:
            head = f.readline()
        m = re.match(r"HloModule\s+([^\s,]+)", head)
        found.append((path, m.group(1) if m else "?"))
    return found


class SelfTest(unittest.TestCase):
    def test_block(self):
        text = "\n".join([
            "HloModule h3.joint_block, is_scheduled=true, entry_computation_layout={(bf16[4,8]{1,0})->bf16[4,8]{1,0}}",
            "",
            "%fused_computation (param_0: bf16[4,8], param_1: bf16[8]) -> bf16[4,8] {",
            "  %param_0 = bf16[4,8]{1,0} parameter(0)",
            "  %param_1 = bf16[8]{0} parameter(1)",
            "  %broadcast.1 = bf16[4,8]{1,0} broadcast(%param_1), dimensions={1}",
            "  ROOT %multiply.2 = bf16[4,8]{1,0} multiply(%param_0, %broadcast.1)",
            "}",
            "",
            "%triton_gemm_dot (p0: bf16[4,8], p1: bf16[8,8]) -> bf16[4,8] {",
            "  %p0 = bf16[4,8]{1,0} parameter(0)",
            "  %p1 = bf16[8,8]{1,0} parameter(1)",
            "  ROOT %dot.1 = bf16[4,8]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            "}",
            "",
            "ENTRY %main.9 (Arg_0: bf16[4,8], Arg_1: bf16[8], Arg_2: bf16[8,8]) -> bf16[4,8] {",
            "  %Arg_0 = bf16[4,8]{1,0} parameter(0)",
            "  %Arg_1 = bf16[8]{0} parameter(1)",
            "  %Arg_2 = bf16[8,8]{1,0} parameter(2)",
            "  %loop_multiply_fusion = bf16[4,8]{1,0} fusion(%Arg_0, %Arg_1), kind=kLoop, calls=%fused_computation",
            '  %gemm_fusion_dot = bf16[4,8]{1,0} fusion(%loop_multiply_fusion, %Arg_2), kind=kCustom, '
            'calls=%triton_gemm_dot, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}',
            '  %custom-call.3 = (bf16[4,8]{1,0}, s8[64]{0}) custom-call(%gemm_fusion_dot, %Arg_2), '
            'custom_call_target="__cublas$lt$matmul"',
            "  %get-tuple-element.1 = bf16[4,8]{1,0} get-tuple-element(%custom-call.3), index=0",
            "  ROOT %copy.4 = bf16[4,8]{0,1} copy(%get-tuple-element.1)",
            "}",
        ])
        out = summarize(text)
        self.assertEqual(out[0], "fusions: 2 (1 kLoop, 1 kCustom __triton_gemm)")
        self.assertEqual(out[1], "custom-calls: 1 (1 __cublas$lt$matmul)")
        self.assertEqual(out[2], "other executed instructions: 1 copy")
        self.assertIn("root multiply", out[3])
        self.assertIn("root dot", out[4])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="the --xla_dump_to folder")
    ap.add_argument("--module", default="joint_block", help="regex on the file or HloModule name")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        res = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest))
        return 0 if res.wasSuccessful() else 1
    if not args.dir:
        ap.error("give the dump folder (or --self-test)")
    found = modules(args.dir)
    pick = [(p, n) for p, n in found if re.search(args.module, os.path.basename(p)) or re.search(args.module, n)]
    if not pick:
        print(f"no optimized module matches {args.module!r} under {args.dir}; found {len(found)}:")
        for p, n in found:
            print(f"  {n}  ({os.path.basename(p)})")
        return 1
    for p, n in pick:
        print(f"== {n} ({p})")
        print("\n".join(summarize(open(p).read())) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
