"""Checks tools/analysis/nested_checkpoint_bound.py on chains whose answers are known in kind.

Exit 77 (skipped) where numpy is missing.
"""
import importlib.util
import math
import os
import sys

try:
    import numpy  # noqa: F401
except ImportError:
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "..", "..", "tools", "analysis", "nested_checkpoint_bound.py")
spec = importlib.util.spec_from_file_location("nested_checkpoint_bound", PATH)
bound = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bound)

MIB = 2**20


def chain(n, out_mib=8, saved_mib=16, fwd=1.0, bwd=2.0):
    stage = {"name": "s", "out_bytes": out_mib * MIB, "saved_bytes": saved_mib * MIB,
             "fwd_peak": 0, "bwd_peak": out_mib * MIB, "fwd_time": fwd, "bwd_time": bwd}
    return {"fixed_bytes": 0, "stages": [{"name": f"s{i}", "variants": [dict(stage)]} for i in range(n)]}


def overhead(c, budget_mib, nested, variants="first"):
    base = sum(s["variants"][0]["fwd_time"] + s["variants"][0]["bwd_time"] for s in c["stages"])
    t = bound.solve(c, budget_mib, 1.0, nested, variants)
    return t / base - 1


failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


c = chain(16)
budgets = list(range(40, 420, 8))
one = [overhead(c, b, False) for b in budgets]
nest = [overhead(c, b, True) for b in budgets]
for b, o, n in zip(budgets, one, nest):
    expect(n <= o + 1e-12, f"at {b} MiB nested ({n}) is slower than one level ({o})")
for series, name in ((one, "one level"), (nest, "nested")):
    for (b0, x0), (b1, x1) in zip(zip(budgets, series), zip(budgets[1:], series[1:])):
        expect(x1 <= x0 + 1e-12, f"{name}: {b1} MiB ({x1}) slower than {b0} MiB ({x0})")
# Room for every stage's output, saved bytes and the turn: nothing recomputed.
expect(abs(overhead(c, 16 * 24 + 64, False)) < 1e-12, "one level recomputes with room to keep all")
expect(abs(overhead(c, 16 * 24 + 64, True)) < 1e-12, "nested recomputes with room to keep all")
# Nesting reaches budgets that one level cannot.
reach_one = min(b for b, o in zip(budgets, one) if not math.isinf(o))
reach_nest = min(b for b, n in zip(budgets, nest) if not math.isinf(n))
expect(reach_nest < reach_one, f"nested reaches {reach_nest} MiB, one level {reach_one} MiB")
# Where one level fits only by checkpointing, it recomputes at most one forward of every stage.
for b, o in zip(budgets, one):
    if not math.isinf(o):
        expect(o <= 1.0 / 3 + 1e-12, f"one level at {b} MiB recomputes more than one forward: {o}")

# Variants: a second one that keeps half the saved bytes for a tenth more backward time.
lean = chain(16, saved_mib=8, bwd=2.2)
both = chain(16)
for stage, lean_stage in zip(both["stages"], lean["stages"]):
    stage["variants"].append(dict(lean_stage["variants"][0], name="lean"))
base = 16 * 3.0
mixed_won = False
prev = math.inf
for b in budgets:
    first = overhead(both, b, True)
    mixed = overhead(both, b, True, "all")
    free = overhead(both, b, True, "free")
    lean_t = bound.solve(lean, b, 1.0, True) / base - 1
    expect(mixed <= min(first, lean_t) + 1e-12,
           f"at {b} MiB the variants ({mixed}) lose to one variant throughout ({first}, {lean_t})")
    expect(free <= mixed + 1e-12, f"at {b} MiB the floor ({free}) is above the optimum ({mixed})")
    expect(mixed <= prev + 1e-12, f"variants: {b} MiB ({mixed}) slower than less memory ({prev})")
    prev = mixed
    mixed_won = mixed_won or mixed < min(first, lean_t) - 1e-9
expect(mixed_won, "at no budget does a mix of variants beat each variant alone")
expect(abs(overhead(both, 16 * 24 + 64, True, "all")) < 1e-12,
       "with room to keep all, the variants cost time")
# The floor: the lean bytes at the default's times, which the two chains' own variants never are.
expect(abs(overhead(both, 16 * 16 + 64, True, "free")) < 1e-12,
       "the floor recomputes where the lean bytes fit at the default's times")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"ok: 16 stages, one level from {reach_one} MiB, nested from {reach_nest} MiB")
