"""libmonet_preload.so with an unchanged PyTorch program (Debian's python3-torch, CPU).

Exits 77 (skipped) where PyTorch or torchvision is missing. Every case has a time limit, so a hang
is a failure, not a stuck CI.
"""
import os
import re
import subprocess
import sys

PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.environ["MONET_LIB_DIR"]
LAUNCHER = os.environ["MONET_LAUNCHER"]
PRELOAD = os.path.join(LIB, "libmonet_preload.so")
TRAIN = os.path.join(HERE, "train_torchvision.py")

if subprocess.run([PYTHON, "-c", "import torch, torchvision"], capture_output=True).returncode:
    print("python3-torch or python3-torchvision missing: skipped")
    sys.exit(77)

failures = []
checks = 0


def run(cmd, env_extra, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONET_")}
    env.update(env_extra)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def check(name, ok, result):
    global checks
    checks += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if not ok:
        print(f"  exit {result.returncode}\n  stdout: {result.stdout}\n  stderr: {result.stderr}")
        failures.append(name)


def allocations(stderr):
    m = re.search(r"allocations\s+(\d+)", stderr)
    return int(m.group(1)) if m else 0


# A program without PyTorch: nothing visible.
plain = run(["/bin/ls", "/"], {})
ls = run(["/bin/ls", "/"], {"LD_PRELOAD": PRELOAD, "MONET_BUDGET": "1GiB"})
check("ls is unchanged", ls.returncode == 0 and ls.stdout == plain.stdout and ls.stderr == "", ls)

# A real torchvision model trains under a sufficient budget, its tensors served by monet.
ok = run([PYTHON, TRAIN, "--steps", "3"], {"LD_PRELOAD": PRELOAD, "MONET_BUDGET": "2GiB"})
check("resnet18 trains under 2GiB",
      ok.returncode == 0 and "step 2" in ok.stdout and allocations(ok.stderr) > 1000
      and "budget                     2.00 GiB" in ok.stderr, ok)

# The same through the launcher, which finds the preload itself.
launched = run([LAUNCHER, "run", "--budget", "2GiB", "--stats", "--", PYTHON, TRAIN,
                "--steps", "2"], {"MONET_LIB_DIR": LIB})
check("monet run launches it", launched.returncode == 0 and allocations(launched.stderr) > 1000,
      launched)

# A budget too small ends in PyTorch's OutOfMemoryError carrying monet's message.
small = run([PYTHON, TRAIN, "--batch", "32", "--expect-oom"],
            {"LD_PRELOAD": PRELOAD, "MONET_BUDGET": "96MiB"}, timeout=120)
check("too small a budget raises OutOfMemoryError with monet's message",
      small.returncode == 3 and "tried to allocate" in small.stdout, small)

# A malformed budget stops the program at start with a clear message.
bad = run([PYTHON, "-c", "print('ran')"], {"LD_PRELOAD": PRELOAD, "MONET_BUDGET": "lots"})
check("malformed MONET_BUDGET is a clear error at start",
      bad.returncode == 2 and "MONET_BUDGET='lots'" in bad.stderr and "ran" not in bad.stdout,
      bad)

print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
