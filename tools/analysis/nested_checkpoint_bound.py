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
monet's memory model (src/planner/simulate.h), so compare the columns with each other, and the
one-level column with `monet-plan --strategy dp` as a check of the approximation.

With --variants, two more columns. "nested, variants": the same program where a stage that keeps
what it saves may keep it in any of its variants (a stage run without saving runs its first):
the optimum over nested schedules and variants together, under every one-level plan of monet's
joint planner, so that `monet-plan --strategy monet` at the same budget says how far that planner
is from the best any schedule of these variants can do. "free variants": each stage given one
variant of its least numbers, the leanest bytes at the fastest times, which no variant has: a
floor under any plan of these variants, however they were mixed (bytes rounded down for it).

usage: nested_checkpoint_bound.py CHAIN.json BUDGET_MIB [BUDGET_MIB ...] [--unit MIB] [--variants]
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


def free_variant(stage):
    """Each number at its least over the stage's variants: the leanest bytes at the fastest times,
    which no variant has. Every constraint of the program is a sum of bytes under the room and its
    objective a sum of times, so a chain of these can only plan cheaper than any choice of the real
    variants: its optimum is a floor under every plan of the chain."""
    fields = ("out_bytes", "saved_bytes", "fwd_peak", "bwd_peak", "fwd_time", "bwd_time")
    return {k: min(v[k] for v in stage["variants"]) for k in fields}


def solve(chain, budget_mib, unit_mib, nested, variants="first"):
    """The least time of the chain within the budget, or inf. `variants`: "first" (each stage's
    first variant, checkpoint-only), "all" (a stage that keeps what it saves keeps it in any of
    its variants; a stage run without saving runs its first; with `nested`, the optimum over
    nested schedules and variants together, which no one-level plan can beat) or "free" (each
    stage one variant of its least numbers: a floor)."""
    if variants == "free":
        chosen = [[free_variant(s)] for s in chain["stages"]]
    elif variants == "all":
        chosen = [s["variants"] for s in chain["stages"]]
    else:
        chosen = [s["variants"][:1] for s in chain["stages"]]
    n = len(chosen)

    def units(b):
        # Rounded down for the floor, so that the coarse units cannot raise it.
        units_mib = b / 2**20 / unit_mib
        return int(math.floor(units_mib)) if variants == "free" else int(math.ceil(units_mib))

    # 1-based stage numbers; index 0 is the chain's input, held outside (fixed_bytes). `modes[k]`
    # holds each variant's (saved, fwd_peak, bwd_peak, fwd, bwd); the lists are of the first.
    out = [0] + [units(vs[0]["out_bytes"]) for vs in chosen]
    modes = [[(0, 0, 0, 0.0, 0.0)]] + [
        [
            (units(v["saved_bytes"]), units(v["fwd_peak"]), units(v["bwd_peak"]), v["fwd_time"],
             v["bwd_time"])
            for v in vs
        ]
        for vs in chosen
    ]
    saved, fwd_peak, bwd_peak, fwd, bwd = (list(field) for field in zip(*(ms[0] for ms in modes)))
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

    def all_kept(s, t, mode=None):
        """Least room and time to run s..t forward keeping everything, then backward; with
        `mode`, stage s alone in that variant (s == t)."""
        sv, fp, bp, ft, bt = mode or modes[s][0]

        def kept(k):
            return out[k] + (sv if k == s else saved[k])

        held, need = out[t], 0  # the gradient of x(t)
        for k in range(s, t + 1):
            need = max(need, held + kept(k) + (fp if k == s else fwd_peak[k]))
            held += kept(k)
        for k in range(t, s - 1, -1):
            need = max(need, held + (out[k - 1] if k > s else 0) + (bp if k == s else bwd_peak[k]))
            held -= kept(k) + (out[k] if k < t else 0)
            held += out[k - 1] if k > s else 0
        return need, ft + bt + sum(fwd[s + 1 : t + 1]) + sum(bwd[s + 1 : t + 1])

    table = {}
    kept_only = {}  # (s, t): the time of running s..t all kept, by room; computed once
    for length in range(1, n + 1):
        for s in range(1, n - length + 2):
            t = s + length - 1
            need, time = all_kept(s, t)
            kept_only[s, t] = np.where(m >= need, time, math.inf)
            best = kept_only[s, t]
            if s == t:
                for mode in modes[s][1:]:  # the stage alone, in another variant
                    need, time = all_kept(s, s, mode)
                    best = np.minimum(best, np.where(m >= need, time, math.inf))
            if s < t:
                for sv, fp, bp, ft, bt in modes[s]:  # s keeps what it saves, in each variant
                    kept = out[s] + sv
                    need_s = max(out[t] + kept + fp, kept + out[s] + out[s - 1] + bp)
                    rest = shifted(table[s + 1, t], kept) + ft + bt
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
    ap.add_argument(
        "--variants",
        action="store_true",
        help="add two columns: nested schedules choosing each kept stage's variant (the optimum "
        "of this model, under every one-level plan of monet's), and each stage's leanest bytes at "
        "its fastest times (a floor under any plan of these variants)",
    )
    a = ap.parse_args()
    chain = json.load(open(a.chain))
    if chain.get("format") == "monet-predictor-state":
        if not a.shape:
            sys.exit("a predictor's state needs --shape (one of its profiled shapes) and --fixed")
        chain = chain_from_state(chain, a.shape, a.fixed)
    base = sum(s["variants"][0]["fwd_time"] + s["variants"][0]["bwd_time"] for s in chain["stages"])
    runs = [("one level", False, "first"), ("nested", True, "first")]
    if a.variants:
        runs.append(("nested, variants", True, "all"))
        runs.append(("free variants", True, "free"))
    print(f"{'budget MiB':>10}" + "".join(f"  {name:>10}" for name, _, _ in runs))
    for b in a.budgets_mib:
        cells = []
        for name, nested, variants in runs:
            t = solve(chain, b, a.unit, nested, variants)
            cell = "no plan" if math.isinf(t) else f"{100 * (t / base - 1):+.1f}%"
            cells.append(f"  {cell:>{max(10, len(name))}}")
        print(f"{b:>10.0f}" + "".join(cells))


if __name__ == "__main__":
    sys.exit(main())
