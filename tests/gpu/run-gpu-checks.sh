#!/usr/bin/env bash
# The checks monet owes on a GPU machine (docs/gpu.md), made to fit one device call. From the
# checkout's root on a machine with a CUDA GPU, PyTorch 2.x and the carried .gpu-deps
# (../shared/gpu/README.md):
#   bash tests/gpu/run-gpu-checks.sh OUT_DIR [STEP...]
# A lease has 15 minutes of device time and a call at most 10, so the steps run in the order of
# what they prove, each bounded by what is left of MONET_GPU_SECONDS (default 540, counted from
# the script's start); a step that needs more than is left is skipped, and says so. STEPs, in
# the order they run when none is named:
#   build         configure build-gpu/ against the wheel's LibTorch and build what the steps run
#   device-tests  the tests that need a device (they must run here, not skip), and the
#                 variants' CPU tests against LibTorch 2.x
#   hooks         the preload and the pluggable allocator training ResNet-18 on cuda
#   kernels       the operator variants against torch's ops on cuda:0 (kernels_bench)
#   runtime       monet-train on cuda:0: the CUPTI stage clock, and both models' --json
#   monet-bench   monet-bench --size gpu --warm $MONET_GPU_BENCH_ARGS, in the time left
# Named only, for a second call: ctest (every test, the CPU ones too), bench (the allocator's and
# the planner's benchmarks), predictor (the predictor's held-out errors on real CPU training
# steps, two runs on a core no other machine shares: #3's time target off a shared VM).
# OUT_DIR gets summary.txt and logs.tar.gz (every log, the bench's report), both rewritten after
# each step, so that a call stopped at its limit still brings back what finished (the device tool
# brings back at most 8 files). The exit status is 1 when a step failed, else 0.
set -uo pipefail
# shellcheck disable=SC2317  # the step_ functions are called by name
out=${1:?usage: run-gpu-checks.sh OUT_DIR [STEP...]}
shift
steps=("$@")
((${#steps[@]})) || steps=(build device-tests hooks kernels runtime monet-bench)
# The smallest time each step needs to prove anything, seconds.
declare -A need=([build]=0 [device-tests]=120 [hooks]=60 [kernels]=45 [runtime]=60
  [monet-bench]=90 [ctest]=300 [bench]=60 [predictor]=160)
deadline=$((SECONDS + ${MONET_GPU_SECONDS:-540}))
bench_args=${MONET_GPU_BENCH_ARGS:---budgets 80,45,33 --rounds 3}
for s in "${steps[@]}"; do
  [[ -n ${need[$s]+x} ]] || { echo "unknown step '$s'; the steps are: ${!need[*]}" >&2; exit 2; }
done
mkdir -p "$out"
logs=$(mktemp -d)
failed=0
train=tests/preload/train_torchvision.py

log() { echo "$*" | tee -a "$out/summary.txt"; }
pack() { cp "$out/summary.txt" "$logs/" 2>/dev/null; tar czf "$out/logs.tar.gz" -C "$logs" .; }
left() { echo $((deadline - SECONDS)); }
# Runs a command bounded by the time left (less 10 s to pack the logs); 124 when stopped.
bounded() {
  local seconds=$(($(left) - 10))
  timeout --kill-after=5 $((seconds > 1 ? seconds : 1)) "$@"
}
# Logs a command's exit status with a label, and counts a failure unless it is the expected one.
check() {
  local label=$1 status=$2 expected=${3:-0}
  log "$label: exit $status$( ((status == 124)) && echo ' (stopped: out of time)')"
  ((status == expected)) || failed=1
}

bash .gpu-deps/device-setup.sh > "$logs/setup.log" 2>&1 || { log "device-setup failed"; pack; exit 1; }
source .gpu-deps/env.sh
log "$(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')"

step_build() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    > "$logs/build.log" 2>&1 &&
    bounded cmake --build build-gpu -j16 --target monet monet_preload monet_preload_torch \
      cuda_allocator_tests torch_hook_tests kernel_tests kernel_cuda_tests kernels_bench \
      runtime_tests kernel_clock_tests kernel_clock_fake_tests monet-train monet-bench \
      allocator_bench planner_bench \
      -- -k 0 >> "$logs/build.log" 2>&1
  local status=$?
  check build "$status"
  # -k 0 builds whatever does not depend on a failed unit, so the steps after still run what
  # was built (a missing program fails its step at once); every error goes in the summary.
  ((status == 0)) || grep -iE -A3 'error|FAILED' "$logs/build.log" | head -n 80 |
    tee -a "$out/summary.txt"
}

# ctest's count of tests skipped (a device test that skips here has not been checked).
skipped() { grep -c '\*\*\*Skipped' "$1"; }

step_device-tests() {
  # The clock's tests time kernels against CUDA events: alone on the device.
  bounded ctest --test-dir build-gpu -R 'KernelClockOnDevice|KernelClockOverFakeCupti' \
    --output-on-failure --timeout 60 \
    > "$logs/device-tests-clock.log" 2>&1
  check "device tests, the CUPTI clock" $?
  # And the variants' CPU tests, and autocast's (whose LibTorch 2.4+ branch only builds there),
  # against LibTorch 2.x. Not the runtime's CPU tests under autocast: in bfloat16 on the wheel's
  # CPU LibTorch they take 220 to 230 s each (`ctest` runs them).
  bounded ctest --test-dir build-gpu --output-on-failure -j8 --timeout 200 \
    -R 'Cuda|_cuda|TorchHookTest|BitPackTest|CatalogueTest|OpsTest|KeptBytesTest|NnTest|AutocastTest' \
    > "$logs/device-tests.log" 2>&1
  check "device tests, the rest" $?
  # The two that failed now and then on memory autograd's CUDA thread freed late (docs/gpu.md,
  # "Sixth run"), five times each.
  bounded ctest --test-dir build-gpu --output-on-failure -j2 --timeout 120 --repeat until-fail:5 \
    -R 'OpsCudaTest.VariantsKeepTheirCataloguedBytesOnCuda|RuntimeBudgetCuda.GradientsMadeInBackward' \
    > "$logs/device-tests-repeated.log" 2>&1
  check "device tests, the late-free ones 5 times each" $?
  log "  $(grep -h 'tests passed' "$logs"/device-tests*.log | tr '\n' ' ')"
  log "  warnings that a stage still holds bytes after its backward: $(cat "$logs"/device-tests*.log |
    grep -c 'still holds') (the sixth run: 10, of 128 B to 328 KiB)"
  grep -h '\*\*\*Failed' "$logs"/device-tests*.log | tee -a "$out/summary.txt"
  log "  skipped: $(($(skipped "$logs/device-tests-clock.log") + $(skipped "$logs/device-tests.log")))" \
    "(0 expected: on a GPU they run)"
}

step_hooks() {
  local run=(env MONET_LIB_DIR=build-gpu/lib build-gpu/tools/monet run)
  bounded "${run[@]}" --budget 8GiB --stats -- python3 "$train" --device cuda --steps 20 \
    --batch 64 > "$logs/preload.log" 2>&1
  check "preload, ResNet-18 under 8GiB" $?
  log "  $(grep -E 'torch reserved' "$logs/preload.log")"
  bounded "${run[@]}" --budget 256MiB -- python3 "$train" --device cuda --batch 256 \
    --expect-oom > "$logs/preload-oom.log" 2>&1
  check "preload, too small a budget (3 expected)" $? 3
  log "  $(grep -m1 'monet: out of memory' "$logs/preload-oom.log")"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 bounded "${run[@]}" --budget 8GiB --stats -- python3 "$train" \
    --device cuda --steps 5 > "$logs/preload-uncached.log" 2>&1
  check "preload, uncached PyTorch (every tensor a cudaMalloc)" $?
  MONET_CUDA_SEGMENTS=expandable bounded "${run[@]}" --budget 8GiB --stats -- python3 "$train" \
    --device cuda --steps 20 --batch 64 > "$logs/preload-expandable.log" 2>&1
  check "preload, expandable segments" $?
  log "  $(grep -E 'fragmentation' "$logs/preload-expandable.log")"
  MONET_BUDGET=8GiB MONET_STATS=1 bounded python3 "$train" --device cuda --steps 20 --batch 64 \
    --pluggable build-gpu/lib/libmonet.so > "$logs/pluggable.log" 2>&1
  check "pluggable allocator, ResNet-18 under 8GiB" $?
  MONET_BUDGET=256MiB bounded python3 "$train" --device cuda --batch 256 --expect-oom \
    --pluggable build-gpu/lib/libmonet.so > "$logs/pluggable-oom.log" 2>&1
  check "pluggable allocator, too small a budget (3 expected)" $? 3
  log "  $(grep -m1 'OutOfMemoryError' "$logs/pluggable-oom.log")"
}

step_kernels() {
  MONET_BENCH_DEVICE=cuda:0 bounded build-gpu/kernels/kernels_bench --benchmark_repetitions=3 \
    --benchmark_min_time=0.1 --benchmark_report_aggregates_only=true \
    > "$logs/kernels-bench-cuda.log" 2>&1
  check "kernels_bench on cuda:0" $?
  grep median "$logs/kernels-bench-cuda.log" | tee -a "$out/summary.txt"
}

step_runtime() {
  MONET_LOG=info bounded build-gpu/tools/monet-train --model transformer --steps 20 \
    > "$logs/train-clock.log" 2>&1
  check "monet-train, 20 steps" $?
  log "  $(grep -m1 -o 'stage times from [^)]*' "$logs/train-clock.log")"
  for model in transformer resnet; do
    bounded build-gpu/tools/monet-train --model "$model" --json > "$logs/train-$model.json" \
      2> "$logs/train-$model.log"
    check "monet-train --model $model --json" $?
  done
}

step_monet-bench() {
  mkdir -p "$logs/bench-warm"
  # shellcheck disable=SC2086  # the arguments are words
  bounded build-gpu/tools/monet-bench --size gpu --warm $bench_args --out "$logs/bench-warm" \
    > "$logs/bench-warm/table.txt" 2> "$logs/bench-warm/log.txt"
  check "monet-bench --size gpu --warm $bench_args" $?
  tee -a "$out/summary.txt" < "$logs/bench-warm/table.txt"
  bench_cells "$logs/bench-warm/results.json" | tee -a "$out/summary.txt"
}

# Per cell: measured and planned overhead, the predictor's signed error (> 0: predictions high),
# the share of a step the stages account for (measured ~ planned x share where the rest of the
# step is what differs), the allocator's work a step, and for monet its time against dp's split
# between the shapes both planned alike and the others.
bench_cells() {
  [[ -f $1 ]] || return 0
  /usr/bin/env python3 - "$1" <<'PY'
import json, sys
def pct(v):
    return "-" if v is None else f"{100 * v:+.1f}%"
for c in json.load(open(sys.argv[1])):
    if c["strategy"] == "none":
        continue
    share = c.get("stage_share")
    # The allocator's work over the cell, a step: cache flushes, segments taken from the device,
    # MiB unmapped and the waits for the device before unmapping (expandable segments); and its
    # refusals over the cell (each a batch run again),
    # of which how many the budget had room for (the free memory in pieces).
    pool = c.get("allocator") or {}
    steps = max(c["iterations"], 1)
    print(f'  {c["model"]:<12} {c["strategy"]:<7} {c["budget_percent"]:>3}%  measured '
          f'{pct(c["overhead"]):>7}  planned {pct(c["planned_overhead"]):>7}  predictor bias '
          f'{pct(c.get("predictor_bias")):>7}  stage share '
          f'{"-" if share is None else format(share, ".2f")}  a step: flushes '
          f'{pool.get("cache_flushes", 0) / steps:.2f} segments '
          f'{pool.get("segment_reserves", 0) / steps:.2f} unmapped '
          f'{pool.get("decommitted_bytes", 0) / steps / 2**20:.0f} MiB in '
          f'{pool.get("decommits", 0) / steps:.2f} waits; refused '
          f'{pool.get("out_of_memory", 0)} ({pool.get("out_of_memory_in_pieces", 0)} in pieces)')
    split = c.get("against_dp_by_plan")
    if split:
        parts = [f'{split[k]["points"]:+.1f} points on the {split[k]["shapes"]} shapes planned {k}'
                 for k in ("alike", "apart") if split[k]["shapes"] > 0]
        print(f'  {"":<12} monet - dp: {", ".join(parts)}')
PY
}

step_ctest() {
  cmake --build build-gpu -j16 > "$logs/build-all.log" 2>&1
  check "build of every target" $?
  bounded ctest --test-dir build-gpu --output-on-failure -j8 --timeout 300 \
    > "$logs/ctest.log" 2>&1
  check "every test" $?
  log "  $(grep -h 'tests passed' "$logs/ctest.log"); skipped: $(skipped "$logs/ctest.log")"
}

step_bench() {
  bounded build-gpu/bench/allocator_bench --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true > "$logs/allocator-bench.log" 2>&1
  check "allocator_bench" $?
  grep median "$logs/allocator-bench.log" | tee -a "$out/summary.txt"
  # The planner runs on the host's CPU: its speed targets (#4) on cores no other VM shares.
  bounded build-gpu/bench/planner_bench --benchmark_repetitions=3 --benchmark_filter=BM_Plan \
    --benchmark_report_aggregates_only=true > "$logs/planner-bench.log" 2>&1
  check "planner_bench" $?
  grep median "$logs/planner-bench.log" | tee -a "$out/summary.txt"
}

step_predictor() {
  cmake --build build-gpu -j16 --target predictor_real_tests > "$logs/build-predictor.log" 2>&1
  check "build of predictor_real_tests" $?
  # One thread (the test sets it), pinned to one core: the times without another tenant's load.
  # Every shape's measurements come back too (one JSON line a shape), to fit laws on offline.
  local run
  for run in 1 2; do
    MONET_TEST_DUMP="$out/predictor-real-$run.jsonl" bounded taskset -c 2 \
      build-gpu/predictor/predictor_real_tests > "$logs/predictor-real-$run.log" 2>&1
    check "predictor_real_tests, run $run" $?
    grep -hE 'BLAS|error' "$logs/predictor-real-$run.log" | tee -a "$out/summary.txt"
  done
}

for s in "${steps[@]}"; do
  if (($(left) < need[$s])); then
    log "== $s: skipped, $(left) s left and it needs about ${need[$s]}"
    continue
  fi
  log "== $s ($(left) s left)"
  start=$SECONDS
  "step_$s"
  log "   $s took $((SECONDS - start)) s"
  pack
done
exit $failed
