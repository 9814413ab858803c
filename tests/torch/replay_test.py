"""Records a dynamic-shape training trace with monet-train and replays it with monet-replay.

The replay must see every allocation the run made and reproduce its peaks, and the pool's
fragmentation on that trace (1 - peak allocated / peak reserved) must stay at or below 5%.
Held whole (as over cudaMalloc) under a budget of exactly that peak, the pool must refuse some
requests and say that the budget had room for them: the free memory in pieces.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

train, replay = os.environ["MONET_TRAIN"], os.environ["MONET_REPLAY"]
with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "train.trace")
    run = subprocess.run([train, "--device", "cpu", "--steps", "40", "--trace", trace],
                         capture_output=True, text=True, timeout=300)
    print(run.stdout)
    if run.returncode != 0:
        sys.exit(f"monet-train failed: {run.stderr}")
    live_allocs = int(re.search(r"allocations\s+(\d+)", run.stdout).group(1))
    out = subprocess.run([replay, trace, "--json"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"monet-replay failed: {out.stderr}")
    print(out.stdout)
    (cpu,) = json.loads(out.stdout)
    assert cpu["device"] == "cpu", cpu
    assert cpu["refused"] == 0 and cpu["unmatched_frees"] == 0, cpu
    # The trace holds at least what the run had allocated when it printed its statistics.
    assert cpu["events"] >= 2 * live_allocs - 200, (cpu, live_allocs)
    assert cpu["peak_allocated_bytes"] > 50 << 20, cpu
    frag = cpu["fragmentation"]
    print(f"fragmentation on a dynamic-shape training trace: {100 * frag:.2f}%")
    assert frag <= 0.05, f"fragmentation {100 * frag:.2f}% is above the 5% target"

    whole = subprocess.run([replay, trace, "--json", "--granularity", "0", "--budget",
                            str(cpu["peak_allocated_bytes"])],
                           capture_output=True, text=True, timeout=300)
    if whole.returncode != 0:
        sys.exit(f"monet-replay --granularity 0 failed: {whole.stderr}")
    print(whole.stdout)
    (held,) = json.loads(whole.stdout)
    assert held["peak_reserved_bytes"] <= cpu["peak_allocated_bytes"], held
    assert held["refused"] > 0 and held["refused_in_pieces"] > 0, held
    assert held["refused_in_pieces"] <= held["refused"], held
    assert held["segment_reserves"] >= held["segment_releases"] > 0, held
