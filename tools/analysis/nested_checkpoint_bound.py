#!/usr/bin/python3
"""What nested recomputation would save over monet's one level of checkpointing, on one chain.

monet's plans checkpoint in one level: a segment keeps its input and, in backward, recomputes its
stages once, keeping all of them (docs/planner.md). Rotor's and Checkmate's schedules nest: a
segment's recomputation may itself checkpoint, which reaches lower budgets at the price of more
recomputation. This script answers whether nesting would make monet's budgets cheaper, by solving
both forms with the same dynamic program (Rotor's, Beaumont et al. 2019) over the same numbers:

  C(s, t, m): the least time to run stages s..t forward and backward, given their input held
  outside m and the gradient of their output inside it, within m bytes. Either stage s keeps what
  it saves and s+1..t follow, or s..k-1 run without saving, x(k-1) is kept, k..t follow, and then
  s..k-1 run again: all kept (one level) or by C again (nested).

Checkpoint-only (each stage's first variant), memory in units of --unit MiB rounded up, each
stage's transient peaks counted at its forward and its backward. The approximation is coarser than
monet's memory model (src/planner/simulate.h), so compare the two columns with each other, and
the one-level column with `monet-plan --strategy dp` as a check of the approximation.

usage: nested_checkpoint_bound.py CHAIN.json BUDGET_MIB [BUDGET_MIB ...] [--unit MIB]
       nested_checkpoint_bound.py STATE.json --shape DIMS --fixed MIB BUDGET_MIB [...]
CHAIN.json is monet-plan's chain format (docs/planner.md); its fixed_bytes count in the budget.
STATE.json is a predictor's saved state (docs/predictor.md): the chain is what it measured at
the profiled shape DIMS (64x256x256), with MIB of memory held outside the stages.
It needs numpy: Debian's python3-numpy, which scripts/install-deps.sh installs with python3-torch
(hence /usr/bin/python3, not whichever python3 comes first on PATH).
"""
import argparse
import json
import math
import sys

import numpy as np


def solve(chain, budget_mib, unit_mib, nested):
    variants = [s["variants"][0] for s in chain["stages"]]
    n = len(variants)

    def units(b):
        return int(math.ceil(b / 2**20 / unit_mib))

    # 1-based stage numbers; index 0 is the chain's input, held outside (fixed_bytes).
    out = [0] + [units(v["out_bytes"]) for v in variants]
    saved = [0] + [units(v["saved_bytes"]) for v in variants]
    fwd_peak = [0] + [units(v["fwd_peak"]) for v in variants]
    bwd_peak = [0] + [units(v["bwd_peak"]) for v in variants]
    fwd = [0.0] + [v["fwd_time"] for v in variants]
    bwd = [0.0] + [v["bwd_time"] for v in variants]
    room = int((budget_mib - chain.get("fixed_bytes", 0) / 2**20) / unit_mib)
    if room < 0:
        return math.inf
    m = np.arange(room + 1)
    inf = np.full(room + 1, math.inf)

    def shifted(arr, by):
        """arr[m - by], inf where m < by: the same sub-problem with `by` units taken."""
        res = inf.copy()
        if by <= room:
            res[by:] = arr[: room + 1 - by]
        return res

    def all_kept(s, t):
        """Least room and time to run s..t forward keeping everything, then backward."""
        held, need = out[t], 0  # the gradient of x(t)
        for k in range(s, t + 1):
            need = max(need, held + out[k] + saved[k] + fwd_peak[k])
            held += out[k] + saved[k]
        for k in range(t, s - 1, -1):
            need = max(need, held + (out[k - 1] if k > s else 0) + bwd_peak[k])
            held -= out[k] + saved[k] + (out[k] if k < t else 0)
            held += out[k - 1] if k > s else 0
        return need, sum(fwd[s : t + 1]) + sum(bwd[s : t + 1])

    table = {}
    kept_only = {}  # (s, t): the time of running s..t all kept, by room; computed once
    for length in range(1, n + 1):
        for s in range(1, n - length + 2):
            t = s + length - 1
            need, time = all_kept(s, t)
            kept_only[s, t] = np.where(m >= need, time, math.inf)
            best = kept_only[s, t]
            if s < t:
                kept = out[s] + saved[s]
                need_s = max(out[t] + kept + fwd_peak[s], kept + out[s] + out[s - 1] + bwd_peak[s])
                rest = shifted(table[s + 1, t], kept) + fwd[s] + bwd[s]
                best = np.minimum(best, np.where(m >= need_s, rest, math.inf))
                ahead, fwd_need = 0.0, 0
                for k in range(s + 1, t + 1):  # s..k-1 run without saving; x(k-1) kept
                    j = k - 1
                    ahead += fwd[j]
                    fwd_need = max(fwd_need, out[t] + (out[j - 1] if j > s else 0) + out[j] + fwd_peak[j])
                    again = table[s, j] if nested else kept_only[s, j]
                    cand = ahead + shifted(table[k, t], out[j]) + again
                    best = np.minimum(best, np.where(m >= fwd_need, cand, math.inf))
            table[s, t] = best
    return table[1, n][room]


def chain_from_state(state, dims, fixed_mib):
    """The chain a predictor's state measured at one profiled shape (the largest bytes, the mean
    times, as the predictor takes them there)."""
    shape = [int(d) for d in dims.split("x")]
    if shape not in state["shapes"]:
        sys.exit(f"{dims} is not a profiled shape of this state; it has {state['shapes']}")
    index = state["shapes"].index(shape)
    stages = []
    for stage in state["stages"]:
        variants = []
        for v in stage["variants"]:
            m = next((m for m in v["measurements"] if m["shape"] == index), None)
            if m is None:
                continue
            costs = {k: int(m[k]["max"]) for k in ("out_bytes", "saved_bytes", "fwd_peak", "bwd_peak")}
            costs.update({k: m[k]["mean"] for k in ("fwd_time", "bwd_time")})
            variants.append(dict(name=v["name"], **costs))
        stages.append({"name": stage["name"], "variants": variants})
    return {"fixed_bytes": int(fixed_mib * 2**20), "stages": stages}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chain")
    ap.add_argument("budgets_mib", nargs="+", type=float)
    ap.add_argument("--unit", type=float, default=0.25, help="memory unit in MiB (default 0.25)")
    ap.add_argument("--shape", help="with a predictor's state: the profiled shape, as 64x256x256")
    ap.add_argument("--fixed", type=float, default=0.0, help="with --shape: MiB held outside")
    a = ap.parse_args()
    chain = json.load(open(a.chain))
    if chain.get("format") == "monet-predictor-state":
        if not a.shape:
            sys.exit("a predictor's state needs --shape (one of its profiled shapes) and --fixed")
        chain = chain_from_state(chain, a.shape, a.fixed)
    base = sum(s["variants"][0]["fwd_time"] + s["variants"][0]["bwd_time"] for s in chain["stages"])
    print(f"{'budget MiB':>10}  {'one level':>10}  {'nested':>10}")
    for b in a.budgets_mib:
        cells = []
        for nested in (False, True):
            t = solve(chain, b, a.unit, nested)
            cells.append("no plan" if math.isinf(t) else f"{100 * (t / base - 1):+.1f}%")
        print(f"{b:>10.0f}  {cells[0]:>10}  {cells[1]:>10}")


if __name__ == "__main__":
    sys.exit(main())
