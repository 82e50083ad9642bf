#!/usr/bin/env bash
# Issue 19's rows in one device command on the nvidia-h200-x2 kind (under 10 minutes): parity of every
# multi-device path first, then the H3 DiT forward on 1 and 2 GPUs (832x480x124), the whole FastH3 clip
# on 2 GPUs (VSA as trained, and dense), the H3 video decode on 1 and 2 GPUs, and the Wan
# clips CFG-parallel (1.3B, 5B, and the 14B step) against one GPU. Each step has its own time limit
# inside one deadline; the logs go under $OUT. Built beforehand, here (the GPU machine has no Go):
#
#   bash bench/build_gpu.sh .gpu/bench ./examples/bench
#   for p in dit/h3 vae/h3video dit/wan fastvideo; do bash bench/build_gpu.sh -test .gpu/$(basename $p).test ./$p; done
#   OUT=/some/dir G=.gpu FASTVIDEO_FFMPEG=... PART=h3 bash bench/multigpu_row.sh     # repo root as cwd
#
# PART=h3 runs the parity tests and the H3 rows, PART=wan the Wan rows: each fits one device command.
set -u
: "${OUT:?set OUT to the output folder}"
G=$(cd "${G:-.gpu}" && pwd)
mkdir -p "$OUT"
end=$((SECONDS + 585))
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
gpu_test() { # package dir, test binary, -test.run pattern
  (cd "$1" && FASTVIDEO_GPU_TEST=1 timeout "$(left 90)" "$G/$2" -test.run "$3" -test.v) >"$OUT/test_$2.log" 2>&1
  echo "$2 $3: rc $? at $SECONDS s"; grep -E "^(--- |ok|FAIL)" "$OUT/test_$2.log" | head -6
}
bench() { # name, time limit, [env ...] -- bench flags
  local name=$1 limit=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout "$(left "$limit")" "$G/bench" -backend xla:cuda "$@" >"$OUT/$name.log" 2>&1
  echo "$name: rc $? at $SECONDS s"; grep -E "summary|tensor parallel|record|stage|rror" "$OUT/$name.log" | cut -c1-260 | head -6
}
nvidia-smi -L >"$OUT/gpus.txt" 2>&1; cat "$OUT/gpus.txt"
part=${PART:?set PART to h3 or wan}
if [ "$part" = h3 ]; then
gpu_test dit/h3 h3.test TestTensorParallel
gpu_test vae/h3video h3video.test TestClipParallelOnGPU
gpu_test dit/wan wan.test TestReplicaOnGPU
gpu_test . fastvideo.test TestCFGParallelOnGPU
dit=(-what h3dit -warmup 1 -iters 3 -h3dit-cached=false)
bench h3dit_1gpu 70 CUDA_VISIBLE_DEVICES=0 -- "${dit[@]}"
bench h3dit_2gpu 80 -- "${dit[@]}" -h3dit-shards 2
bench fasth3_clip_2gpu 90 -- -what clip -clip-gpus 2
bench fasth3_dense_clip_2gpu 90 -- -what clip -clip-dense -clip-gpus 2
vae=(-what h3vae -warmup 1 -iters 3 -h3vae-frames 124)
bench h3vae_1gpu 60 CUDA_VISIBLE_DEVICES=0 -- "${vae[@]}"
bench h3vae_2gpu 60 -- "${vae[@]}" -h3vae-gpus 2
fi
[ "$part" = wan ] || exit 0
for m in wan2.1-t2v-1.3b:10 wan2.2-ti2v-5b:10 wan2.1-t2v-14b:2; do
  model=${m%%:*} steps=${m##*:}
  for g in 1 2; do
    bench "${model}_${g}gpu" 90 -- -what clip -clip-model "$model" -clip-steps "$steps" -clip-gpus "$g"
  done
done
