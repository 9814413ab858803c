#!/usr/bin/env bash
# The checks monet owes on a GPU machine (docs/gpu.md), in one run. From the checkout's root on a
# machine with a CUDA GPU, PyTorch 2.x and the carried .gpu-deps (../shared/gpu/README.md):
#   bash tests/gpu/run-gpu-checks.sh OUT_DIR
# Writes the logs and a summary to OUT_DIR.
set -uo pipefail
out=${1:?usage: run-gpu-checks.sh OUT_DIR}
mkdir -p "$out"
log() { echo "$*" | tee -a "$out/summary.txt"; }

bash .gpu-deps/device-setup.sh > "$out/setup.log" 2>&1 || { log "device-setup failed"; exit 1; }
source .gpu-deps/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/summary.txt"

log "== build against the wheel's LibTorch"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  > "$out/build.log" 2>&1 && cmake --build build-gpu -j16 >> "$out/build.log" 2>&1
log "build: exit $?"

log "== every test (CUDA tests included)"
ctest --test-dir build-gpu --output-on-failure > "$out/ctest.log" 2>&1
log "ctest: exit $?; $(tail -n 3 "$out/ctest.log" | head -n 1)"

train=tests/preload/train_torchvision.py
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
  --budget 8GiB --stats -- python3 "$train" --device cuda --steps 5 > "$out/preload-uncached.log" 2>&1
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

log "== allocator benchmark"
build-gpu/bench/allocator_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  > "$out/bench.log" 2>&1
grep median "$out/bench.log" | tee -a "$out/summary.txt"

# The planner runs on the host's CPU: its speed targets (#4) on cores that no other VM shares.
log "== planner benchmark (host CPU)"
build-gpu/bench/planner_bench --benchmark_repetitions=3 --benchmark_filter=BM_Plan \
  --benchmark_report_aggregates_only=true > "$out/planner-bench.log" 2>&1
grep median "$out/planner-bench.log" | tee -a "$out/summary.txt"
