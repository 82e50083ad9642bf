#!/usr/bin/env bash
# Builds bench/kerneltrace.c on the GPU machine against the CUPTI found there and prints, as the only
# line on stdout, the libcupti to load (for KERNELTRACE_CUPTI); messages go to stderr.
#
#   KT_LIB=$(bash bench/kerneltrace_build.sh /tmp/kerneltrace.so)      # repo root as cwd
#   CUDA_INJECTION64_PATH=/tmp/kerneltrace.so KERNELTRACE_CUPTI=$KT_LIB KERNELTRACE_OUT=trace.csv PROGRAM
#
# CUPTI is looked for, header and library from the same install, in $CUPTI_ROOT, the toolkit
# (/usr/local/cuda/extras/CUPTI, /usr/local/cuda, its targets/*), then the pip wheels of the torch
# venv (site-packages/nvidia/cu13 for CUDA 13, .../cuda_cupti for CUDA 12, then any other). cuda.h comes from
# /usr/local/cuda/include (or the same install). Exit status 1 when no CUPTI or the build failed.
set -u
so=${1:?usage: kerneltrace_build.sh OUTPUT.so}
roots=()
[ -n "${CUPTI_ROOT:-}" ] && roots+=("$CUPTI_ROOT")
roots+=(/usr/local/cuda/extras/CUPTI /usr/local/cuda /usr/local/cuda/targets/*-linux)
site='/opt/torch/.venv/lib/python3*/site-packages/nvidia'
roots+=($site/cu13 $site/cuda_cupti $site/*)  # unquoted: the globs expand here
for root in "${roots[@]}"; do
  [ -f "$root/include/cupti.h" ] || continue
  lib=$(ls "$root"/lib64/libcupti.so* "$root"/lib/libcupti.so* 2>/dev/null | sort -V | tail -1)
  [ -n "$lib" ] || continue
  echo "kerneltrace_build: CUPTI header $root/include/cupti.h, library $lib" >&2
  if gcc -shared -fPIC -O2 -Wall -I"$root/include" -I/usr/local/cuda/include bench/kerneltrace.c -o "$so" -ldl -lpthread >&2; then
    echo "$lib"
    exit 0
  fi
  echo "kerneltrace_build: the build against $root failed" >&2
  exit 1
done
echo "kerneltrace_build: no CUPTI (include/cupti.h with lib*/libcupti.so*) under: ${roots[*]}" >&2
exit 1
