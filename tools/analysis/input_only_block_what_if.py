#!/usr/bin/python3
"""What a basic block that keeps only its input would plan at, before anyone builds it.

monet's leanest basic block (mode `recompute`, docs/kernels.md) keeps the first BatchNorm's output
beside its input and recomputes the second convolution in its backward. A block that kept only its
input would recompute the first convolution and BatchNorm as well. This script adds such a
variant, `input_only`, to every stage of a chain that has both a `compact` and a `recompute`
variant, made from their measured numbers:

  saved_bytes  recompute's less its out_bytes (the first BatchNorm's output has the block's
               output's size: the first convolution sets the width and the stride)
  fwd_time, fwd_peak   recompute's
  bwd_time     recompute's + FACTOR x (recompute's - compact's): what recompute adds is the second
               convolution's forward; the first's, with its BatchNorm's forward, costs FACTOR times
               that (1: the convolution alone; 1.5: a BatchNorm's forward as half a convolution)
  bwd_peak     recompute's + out_bytes (the recomputed BatchNorm output, held during its backward)

and plans each chain with `monet-plan` at the budget, with and without the variant, printing
each plan's time against keeping every stage. Every figure is the memory model's.

usage: input_only_block_what_if.py (--state STATE --shape DIMS [--shape DIMS ...] | --chain FILE)
           --fixed B --budget B [--factor F ...] [--monet-plan PATH] [--strategy S]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile


def run_plan(tool, args):
    out = subprocess.run([tool] + args, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        sys.exit(f"{tool} {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def with_input_only(chain, factor):
    chain = copy.deepcopy(chain)
    added = 0
    for stage in chain["stages"]:
        by_name = {v["name"]: v for v in stage["variants"]}
        if "compact" not in by_name or "recompute" not in by_name:
            continue
        r, c = by_name["recompute"], by_name["compact"]
        v = dict(r, name="input_only")
        v["saved_bytes"] = max(0, r["saved_bytes"] - r["out_bytes"])
        v["bwd_time"] = r["bwd_time"] + factor * max(0.0, r["bwd_time"] - c["bwd_time"])
        v["bwd_peak"] = r["bwd_peak"] + r["out_bytes"]
        stage["variants"].append(v)
        added += 1
    return chain, added


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--state", help="a predictor state (MONET_PREDICTOR_STATE's file)")
    p.add_argument("--shape", action="append", default=[], help="a shape of the state, 64x256x256")
    p.add_argument("--chain", help="a chain file instead of a state")
    p.add_argument("--fixed", required=True, help="memory held outside the stages, e.g. 350MiB")
    p.add_argument("--budget", required=True, help="the budget the plans are made for, e.g. 1879MiB")
    p.add_argument("--factor", type=float, action="append", help="see above (default 1 and 1.5)")
    p.add_argument("--monet-plan", default="build/tools/monet-plan", dest="tool")
    p.add_argument("--strategy", default="monet")
    a = p.parse_args()
    if bool(a.state) == bool(a.chain) or (a.state and not a.shape):
        p.error("give --state with one --shape or more, or --chain")
    if not os.access(a.tool, os.X_OK):
        p.error(f"{a.tool} is not an executable: build monet first or pass --monet-plan")
    factors = a.factor or [1.0, 1.5]
    chains = []
    if a.chain:
        chains.append((a.chain, json.load(open(a.chain))))
    for shape in a.shape:
        text = run_plan(a.tool, ["--predictor", a.state, "--shape", shape, "--print-chain"])
        chains.append((shape, json.loads(text)))
    with tempfile.TemporaryDirectory() as tmp:
        def plan_time(chain, budget):
            path = os.path.join(tmp, "chain.json")
            with open(path, "w") as f:
                json.dump(chain, f)
            plan = json.loads(run_plan(a.tool, ["--chain", path, "--fixed", a.fixed, "--budget",
                                                 budget, "--strategy", a.strategy, "--json"]))
            return plan["time"] if plan["feasible"] else None, plan

        for name, chain in chains:
            kept, _ = plan_time(chain, "1000TiB")
            now, _ = plan_time(chain, a.budget)
            row = [f"{name}: {a.strategy} now " + (f"{100 * (now / kept - 1):+.1f}%" if now else "no plan")]
            for factor in factors:
                extended, added = with_input_only(chain, factor)
                t, plan = plan_time(extended, a.budget)
                used = sum(1 for s in plan["stages"] if s["variant"] == "input_only")
                row.append(f"factor {factor:g}: " + (f"{100 * (t / kept - 1):+.1f}%" if t else "no plan")
                           + f" ({used} of {added} blocks input_only)")
            print(", ".join(row))


if __name__ == "__main__":
    main()
