"""Checks tools/analysis/shape_mix_bound.py on monet-bench cells whose answers are worked by hand."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "..", "..", "tools", "analysis", "shape_mix_bound.py")
spec = importlib.util.spec_from_file_location("shape_mix_bound", PATH)
mix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mix)

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def near(a, b):
    return abs(a - b) < 1e-12


def cell(model, strategy, percent, planned, feasible=True):
    """planned: {shape: (steps, planned seconds, unconstrained seconds)}"""
    return {"model": model, "strategy": strategy, "budget_percent": percent, "feasible": feasible,
            "steps_by_shape": {k: {"steps": n, "seconds": p, "planned_seconds": p,
                                   "unconstrained_seconds": u}
                               for k, (n, p, u) in planned.items()}}


# Two shapes: the small one takes 4 s unconstrained, the large one 6 s (10 s in all). The static
# plan costs +2 s at the large shape and +2 s at the small one (+40%); monet +1.5 s at the large
# (its own plan there is cheaper) and +0.5 s at the small (+20%); dp +1.8 s at the large.
cells = [
    {"model": "cnn", "strategy": "none", "budget_percent": 0, "steps_by_shape": {}},
    cell("cnn", "static", 33, {"4x64x64": (10, 6.0, 4.0), "4x128x128": (5, 8.0, 6.0)}),
    cell("cnn", "monet", 33, {"4x64x64": (10, 4.5, 4.0), "4x128x128": (5, 7.5, 6.0)}),
    cell("cnn", "dp", 33, {"4x64x64": (10, 4.2, 4.0), "4x128x128": (5, 7.8, 6.0)}),
    # An infeasible per-shape strategy does not lower the floor.
    cell("cnn", "greedy", 33, {"4x64x64": (10, 4.0, 4.0), "4x128x128": (5, 6.0, 6.0)},
         feasible=False),
    # A budget where static did not fit gives no row.
    cell("cnn", "static", 20, {"4x64x64": (10, 6.0, 4.0), "4x128x128": (5, 8.0, 6.0)},
         feasible=False),
    cell("cnn", "monet", 20, {"4x64x64": (10, 6.0, 4.0), "4x128x128": (5, 8.0, 6.0)}),
    # A run before planned times were written gives no row either.
    {"model": "old", "strategy": "static", "budget_percent": 33,
     "steps_by_shape": {"8x16": {"steps": 3, "seconds": 1.0}}},
]
rows = mix.bounds(cells)
expect(len(rows) == 1, f"one row expected, got {len(rows)}")
r = rows[0]
expect(r["largest"] == "4x128x128", f"largest {r['largest']}")
expect((r["largest_steps"], r["steps"]) == (5, 15), f"steps {r['largest_steps']}/{r['steps']}")
expect(near(r["largest_share"], 0.6), f"share {r['largest_share']}")
expect(near(r["static"], 0.4), f"static {r['static']}")
expect(near(r["half_static"], 0.2), f"half {r['half_static']}")
expect(set(r["per_shape"]) == {"monet", "dp"}, f"per-shape strategies {sorted(r['per_shape'])}")
expect(near(r["per_shape"]["monet"], 0.2), f"monet {r['per_shape']['monet']}")
expect(near(r["per_shape"]["dp"], 0.2), f"dp {r['per_shape']['dp']}")
# The least plan at the largest shape is monet's 7.5 s: 1.5 s over 10 s.
expect(near(r["floor"], 0.15), f"floor {r['floor']}")
for name, overhead in r["per_shape"].items():
    expect(overhead >= r["floor"] - 1e-12, f"{name} ({overhead}) under the floor ({r['floor']})")
expect(mix.bounds(cells, budget=20) == [], "budget 20 has no feasible static plan")

# The largest shape is the one with the most elements, not the longest first dim.
cells2 = [cell("t", "static", 33, {"16x32": (1, 2.0, 1.0), "8x128": (1, 3.0, 2.0)}),
          cell("t", "monet", 33, {"16x32": (1, 1.0, 1.0), "8x128": (1, 2.5, 2.0)})]
expect(mix.bounds(cells2)[0]["largest"] == "8x128", "largest by size")
# Each cell is measured against its own unconstrained times (the chains it planned on): static's
# +40% is 2 s over 5 s, monet's +10% is 0.5 s over 5 s, though its chains say 1 s at 16x32.
cells2[1]["steps_by_shape"]["16x32"]["unconstrained_seconds"] = 1.0
cells2[1]["steps_by_shape"]["16x32"]["planned_seconds"] = 1.0
cells2[0]["steps_by_shape"]["16x32"]["unconstrained_seconds"] = 3.0
cells2[0]["steps_by_shape"]["16x32"]["planned_seconds"] = 4.0
r2 = mix.bounds(cells2)[0]
expect(near(r2["static"], 0.4), f"static against its own times: {r2['static']}")
expect(near(r2["per_shape"]["monet"], 0.5 / 3.0), f"monet against its own: {r2['per_shape']}")
expect(near(r2["floor"], 0.5 / 3.0), f"floor: {r2['floor']}")

# The command line: a table, --json, and a clear error for a file that is not results.
with tempfile.TemporaryDirectory() as tmp:
    good = os.path.join(tmp, "results.json")
    with open(good, "w") as f:
        json.dump(cells, f)
    run = subprocess.run([sys.executable, PATH, good], capture_output=True, text=True)
    expect(run.returncode == 0 and "4x128x128" in run.stdout and "15.0%" in run.stdout,
           f"table: {run.returncode} {run.stdout!r} {run.stderr!r}")
    run = subprocess.run([sys.executable, PATH, good, "--json"], capture_output=True, text=True)
    expect(run.returncode == 0 and near(json.loads(run.stdout)[0]["floor"], 0.15),
           f"--json: {run.returncode} {run.stdout!r}")
    bad = os.path.join(tmp, "chain.json")
    with open(bad, "w") as f:
        json.dump({"stages": []}, f)
    run = subprocess.run([sys.executable, PATH, bad], capture_output=True, text=True)
    expect(run.returncode != 0 and "not monet-bench's results" in run.stderr,
           f"bad file: {run.returncode} {run.stderr!r}")

for f in failures:
    print("FAILED:", f)
sys.exit(1 if failures else 0)
