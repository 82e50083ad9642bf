#!/usr/bin/env python3
"""Fixture of the prompt template enhancer, made by upstream's own module, imported unchanged.

    python3 gen_prompt_enhance.py --upstream FASTVIDEO_CHECKOUT --out prompt_enhance.json [--commit SHA]

FASTVIDEO_CHECKOUT is a hao-ai-lab/FastVideo checkout (the fixture was made at 2f3d407); only
fastvideo/mlx_runtime/prompt_enhance.py is loaded, with fastvideo.logger stubbed (its one import).
For each prompt the fixture holds enhance_prompt_template's result (or that it raises ValueError)
and enhance_cache_path's file name for the template backend, the key the cache is read under.
"""
import argparse
import importlib.util
import json
import logging
import os
import subprocess
import sys
import types

PROMPTS = [
    "a red fox",
    "A red fox trots through fresh snow at dawn.",
    "  a   panda\teats\nbamboo  ",  # "pan" is a motion cue inside "panda"
    "sunflower field",  # "sun" is a light cue inside "sunflower"
    "cinematic close-up of a cat",
    "a dog...",
    "....",
    "A ship sails at golden hour",
    "a\x1cb\u3000c\u2003d",  # Python's white space includes U+001C..U+001F
    "Ünïcödé café at night, neon signs",
    # 160 characters and more, with camera and light cues: kept as it is.
    "A cinematic wide shot of a lighthouse on a cliff at golden hour, waves crashing below, seagulls circling, "
    "the beam sweeping across the water as the sun sets behind dark clouds.",
    # long, with a camera cue but no light cue: extended.
    "A tracking shot follows a cyclist through the narrow streets of an old town, past market stalls, children "
    "playing, a baker carrying bread, pigeons scattering from the cobbles.",
    # under 160 characters with both cues: extended.
    "close-up, soft rim light, a violinist plays",
    "",
    "   \n\t ",
]


def load(checkout):
    logger = types.ModuleType("fastvideo.logger")
    logger.init_logger = logging.getLogger
    pkg = types.ModuleType("fastvideo")
    pkg.__path__ = []
    sys.modules["fastvideo"], sys.modules["fastvideo.logger"] = pkg, logger
    path = os.path.join(checkout, "fastvideo", "mlx_runtime", "prompt_enhance.py")
    spec = importlib.util.spec_from_file_location("fastvideo.mlx_runtime.prompt_enhance", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="", help="the checkout's commit, where --upstream is no git work tree")
    args = ap.parse_args()
    pe = load(args.upstream)
    commit = args.commit
    if not commit:
        commit = subprocess.run(["git", "-C", args.upstream, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    cases = []
    for p in PROMPTS:
        case = {"prompt": p}
        try:
            case["template"] = pe.enhance_prompt_template(p)
            normalized = pe._normalize_user_prompt(p)
            case["normalized"] = normalized
            case["cache_file"] = pe.enhance_cache_path(normalized, backend="template", model=None, cache_dir=None).name
        except ValueError as e:
            case["error"] = str(e)
        cases.append(case)
    with open(args.out, "w") as f:
        json.dump({"kind": "prompt_enhance_template", "upstream_commit": commit, "python": sys.version.split()[0], "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
