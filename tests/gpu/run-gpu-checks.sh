#!/usr/bin/env bash
# The checks monet owes on a GPU machine (docs/gpu.md). From the checkout's root on a machine
# with a CUDA GPU, PyTorch 2.x and the carried .gpu-deps (../shared/gpu/README.md):
#   bash tests/gpu/run-gpu-checks.sh OUT_DIR [STEP...]
# STEPs, in the order they run when none is named:
#   build    configure and build build-gpu/ against the wheel's LibTorch
#   ctest    every test, the CUDA ones included (they must run, not skip)
#   hooks    the preload and the pluggable allocator training ResNet-18 on cuda
#   bench    the allocator and planner benchmarks
#   runtime  the CUPTI kernel clock and monet-train on cuda:0
#   kernels  the operator variants' speed on cuda:0
#   monet-bench  monet-bench --size gpu --warm (bounded by MONET_GPU_BENCH_SECONDS, default 540)
# A device call runs 10 minutes at most: run the steps over several calls on the same warm
# machine (build-gpu/ stays there between calls). Writes the logs and summary.txt to OUT_DIR.
set -uo pipefail
out=${1:?usage: run-gpu-checks.sh OUT_DIR [STEP...]}
shift
steps=("$@")
((${#steps[@]})) || steps=(build ctest hooks bench runtime kernels monet-bench)
mkdir -p "$out"
log() { echo "$*" | tee -a "$out/summary.txt"; }
train=tests/preload/train_torchvision.py

bash .gpu-deps/device-setup.sh > "$out/setup.log" 2>&1 || { log "device-setup failed"; exit 1; }
source .gpu-deps/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/summary.txt"

step_build() {
  log "== build against the wheel's LibTorch"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    > "$out/build.log" 2>&1 && cmake --build build-gpu -j16 >> "$out/build.log" 2>&1
  log "build: exit $?"
}

step_ctest() {
  log "== every test (CUDA tests included)"
  ctest --test-dir build-gpu --output-on-failure -j8 > "$out/ctest.log" 2>&1
  log "ctest: exit $?; $(tail -n 3 "$out/ctest.log" | head -n 1)"
  log "skipped: $(grep -c '\*\*\*Skipped' "$out/ctest.log") (the CUDA tests must run here, not skip)"
}

step_hooks() {
  log "== preload: ResNet-18 on cuda under 8GiB"
  MONET_LIB_DIR=build-gpu/lib build-gpu/tools/monet run --budget 8GiB --stats -- \
    python3 "$train" --device cuda --steps 20 --batch 64 > "$out/preload.log" 2>&1
  log "preload train: exit $?; $(grep -E 'torch reserved' "$out/preload.log")"

  log "== preload: too small a budget"
  MONET_LIB_DIR=build-gpu/lib build-gpu/tools/monet run --budget 256MiB -- \
    python3 "$train" --device cuda --batch 256 --expect-oom > "$out/preload-oom.log" 2>&1
  log "preload oom: exit $? (3 expected); $(grep -m1 'monet: out of memory' "$out/preload-oom.log")"

  log "== preload: uncached PyTorch, every tensor a cudaMalloc"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 MONET_LIB_DIR=build-gpu/lib build-gpu/tools/monet run \
    --budget 8GiB --stats -- python3 "$train" --device cuda --steps 5 \
    > "$out/preload-uncached.log" 2>&1
  log "preload uncached: exit $?"

  log "== preload with expandable segments"
  MONET_CUDA_SEGMENTS=expandable MONET_LIB_DIR=build-gpu/lib build-gpu/tools/monet run \
    --budget 8GiB --stats -- python3 "$train" --device cuda --steps 20 --batch 64 \
    > "$out/preload-expandable.log" 2>&1
  log "preload expandable: exit $?; $(grep -E 'fragmentation' "$out/preload-expandable.log")"

  log "== pluggable allocator: ResNet-18 on cuda"
  MONET_BUDGET=8GiB MONET_STATS=1 python3 "$train" --device cuda --steps 20 --batch 64 \
    --pluggable build-gpu/lib/libmonet.so > "$out/pluggable.log" 2>&1
  log "pluggable train: exit $?"

  log "== pluggable allocator: too small a budget"
  MONET_BUDGET=256MiB python3 "$train" --device cuda --batch 256 --expect-oom \
    --pluggable build-gpu/lib/libmonet.so > "$out/pluggable-oom.log" 2>&1
  log "pluggable oom: exit $? (3 expected); $(grep -m1 'OutOfMemoryError' "$out/pluggable-oom.log")"
}

step_bench() {
  log "== allocator benchmark"
  build-gpu/bench/allocator_bench --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true > "$out/bench.log" 2>&1
  grep median "$out/bench.log" | tee -a "$out/summary.txt"
  # The planner runs on the host's CPU: its speed targets (#4) on cores no other VM shares.
  log "== planner benchmark (host CPU)"
  build-gpu/bench/planner_bench --benchmark_repetitions=3 --benchmark_filter=BM_Plan \
    --benchmark_report_aggregates_only=true > "$out/planner-bench.log" 2>&1
  grep median "$out/planner-bench.log" | tee -a "$out/summary.txt"
}

step_runtime() {
  log "== CUPTI kernel clock (KernelClockOnDevice must run, not skip)"
  build-gpu/tests/runtime/kernel_clock_tests > "$out/kernel-clock.log" 2>&1
  log "kernel clock: exit $?; $(grep -c 'SKIPPED \]' "$out/kernel-clock.log") skipped"
  MONET_LOG=info build-gpu/tools/monet-train --model transformer --steps 20 \
    > "$out/train-clock.log" 2>&1
  log "monet-train stage clock: exit $?; $(grep -m1 -o 'stage times from [^)]*' "$out/train-clock.log")"
  for model in transformer resnet; do
    build-gpu/tools/monet-train --model "$model" --json > "$out/train-$model.json" \
      2> "$out/train-$model.log"
    log "monet-train --model $model: exit $?"
  done
}

step_kernels() {
  log "== kernels benchmark on cpu and cuda:0"
  for d in cpu cuda:0; do
    MONET_BENCH_DEVICE=$d build-gpu/kernels/kernels_bench --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true > "$out/kernels-bench-${d%%:*}.log" 2>&1
    log "kernels bench on $d: exit $?"
  done
}

step_monet-bench() {
  log "== monet-bench --size gpu --warm"
  mkdir -p "$out/bench-warm"
  timeout "${MONET_GPU_BENCH_SECONDS:-540}" build-gpu/tools/monet-bench --size gpu --warm \
    --out "$out/bench-warm" > "$out/bench-warm/table.txt" 2> "$out/bench-warm/log.txt"
  log "monet-bench warm: exit $? (124: stopped at the time bound)"
}

for s in "${steps[@]}"; do
  if ! declare -F "step_$s" > /dev/null; then
    log "unknown step '$s'; the steps are: build ctest hooks bench runtime kernels monet-bench"
    exit 2
  fi
  "step_$s"
done
