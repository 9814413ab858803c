#!/usr/bin/python3
"""How low a per-shape plan can bring a monet-bench cell, given the mix of shapes it runs.

A static plan is made once, for the largest input, and run at every shape. A per-shape strategy
(`greedy`, `dp`, `monet`) plans each shape on its own, but at the largest shape it runs a plan no
cheaper than the cheapest any strategy found there (monet's joint planner, within about 1% of the
optimum where docs/planner.md could check it), and that shape's steps are part of every run. So, in the memory model's times (what each cell's `steps_by_shape` holds: `planned_seconds`
under the cell's plans and `unconstrained_seconds` with no budget), the largest shape alone puts
a floor under every per-shape strategy's overhead (each cell against its own unconstrained
seconds, those of the chains it planned on, as its `planned_overhead`):

  floor = least, over the cells, of (planned seconds at the largest shape - its unconstrained
          seconds) / unconstrained seconds of all shapes

even if every smaller shape ran with no recomputation at all. When the floor is above half of
the static plan's overhead, "under half of static" cannot be reached at that budget by any
per-shape planner with these variants; only cheaper plans at the largest shape would help.

usage: shape_mix_bound.py RESULTS.json [RESULTS.json ...] [--budget PERCENT] [--json]
RESULTS.json is what `monet-bench --json` or its results.json holds (DESIGN.md, "Formats"):
one object per cell. Cells without `steps_by_shape` times (runs before 2026-11-27) are skipped.
Every figure is a planned one (the memory model's), so noise does not move it.
"""
import argparse
import json
import sys

PER_SHAPE = ("greedy", "dp", "monet")


def dims(key):
    return [int(d) for d in key.split("x")]


def size(key):
    n = 1
    for d in dims(key):
        n *= d
    return n


def bounds(cells, budget=None):
    """One row per (model, budget percent) whose static and per-shape cells hold planned times."""
    by_cell = {}
    for c in cells:
        if c.get("budget_percent") and (budget is None or c["budget_percent"] == budget):
            by_cell.setdefault((c["model"], c["budget_percent"]), {})[c["strategy"]] = c
    rows = []
    for (model, percent), strategies in sorted(by_cell.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        static = strategies.get("static")
        if not static or not static.get("feasible", True):
            continue
        shapes = static.get("steps_by_shape") or {}
        if not shapes or "unconstrained_seconds" not in next(iter(shapes.values())):
            continue
        if sum(s["unconstrained_seconds"] for s in shapes.values()) <= 0:
            continue
        largest = max(shapes, key=lambda k: (size(k), dims(k)))

        def parts(cell):
            # Each cell against its own unconstrained times: those of the chains it planned on.
            steps = cell["steps_by_shape"]
            unconstrained = sum(s["unconstrained_seconds"] for s in steps.values())
            at_largest = steps[largest]["planned_seconds"] - steps[largest]["unconstrained_seconds"]
            return (sum(s["planned_seconds"] for s in steps.values()) / unconstrained - 1,
                    at_largest / unconstrained, steps[largest]["unconstrained_seconds"] / unconstrained)

        per_shape = {n: parts(c) for n, c in strategies.items()
                     if n in PER_SHAPE and c.get("feasible", True) and c.get("steps_by_shape")
                     and largest in c["steps_by_shape"]
                     and sum(s["unconstrained_seconds"] for s in c["steps_by_shape"].values()) > 0}
        static_overhead, static_at_largest, share = parts(static)
        rows.append({
            "model": model,
            "budget_percent": percent,
            "largest": largest,
            "largest_steps": shapes[largest]["steps"],
            "steps": sum(s["steps"] for s in shapes.values()),
            "largest_share": share,
            "static": static_overhead,
            "half_static": static_overhead / 2,
            "per_shape": {n: p[0] for n, p in sorted(per_shape.items())},
            "floor": min([static_at_largest] + [p[1] for p in per_shape.values()]),
        })
    return rows


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="monet-bench results JSON")
    parser.add_argument("--budget", type=int, help="only this budget percent (33)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    out = []
    for path in args.results:
        try:
            with open(path) as f:
                cells = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"shape_mix_bound: cannot read {path}: {e}")
        if not isinstance(cells, list):
            sys.exit(f"shape_mix_bound: {path} is not monet-bench's results (a JSON array of cells)")
        rows = bounds(cells, args.budget)
        if not rows:
            print(f"{path}: no cell with a static plan and per-shape planned times", file=sys.stderr)
        for r in rows:
            r["file"] = path
        out += rows
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'model':<12} {'budget':>6} {'largest':<12} {'steps':>7} {'share':>6} {'static':>7} "
          f"{'half':>6} {'floor':>6}  per-shape strategies, planned")
    for r in out:
        strategies = ", ".join(f"{n} {100 * o:+.1f}%" for n, o in r["per_shape"].items())
        print(f"{r['model']:<12} {r['budget_percent']:>5}% {r['largest']:<12} "
              f"{r['largest_steps']:>3}/{r['steps']:<3} {100 * r['largest_share']:>5.1f}% "
              f"{100 * r['static']:>+6.1f}% {100 * r['half_static']:>5.1f}% "
              f"{100 * r['floor']:>5.1f}%  {strategies}")


if __name__ == "__main__":
    main(sys.argv[1:])
