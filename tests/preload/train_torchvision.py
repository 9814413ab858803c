"""Trains a torchvision ResNet-18 for a few steps on random images of varying size.

Run it under libmonet_preload.so, or with --pluggable LIB to install monet through PyTorch's
pluggable-allocator hook (CUDA). With --expect-oom the budget is meant to be too small: the script
then checks that the training ends in PyTorch's OutOfMemoryError and exits 3 (on CPU, and through
the pluggable hook, the error must carry monet's own message); any other ending is a failure.
"""
import argparse
import sys

import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--expect-oom", action="store_true")
parser.add_argument("--device", default="cpu", help="cpu or cuda")
parser.add_argument("--pluggable", metavar="LIB", help="libmonet.so, installed as CUDA allocator")
args = parser.parse_args()

if args.pluggable:
    allocator = torch.cuda.memory.CUDAPluggableAllocator(args.pluggable, "monet_malloc",
                                                         "monet_free")
    torch.cuda.memory.change_current_allocator(allocator)
OutOfMemory = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

torch.manual_seed(0)
torch.set_num_threads(2)
model = torchvision.models.resnet18(num_classes=10).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    for step in range(args.steps):
        side = (64, 96, 80)[step % 3]
        images = torch.randn(args.batch, 3, side, side, device=args.device)
        labels = torch.randint(0, 10, (args.batch,), device=args.device)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} side {side} loss {loss.item():.4f}", flush=True)
except OutOfMemory as e:
    message = str(e)
    print(f"OutOfMemoryError: {message.splitlines()[0]}", flush=True)
    # Under the preload on CUDA, PyTorch raises its own message (monet's line is on stderr).
    carries_monet = "monet: out of memory" in message and "MONET_BUDGET" in message
    if args.expect_oom and (carries_monet or (args.device == "cuda" and not args.pluggable)):
        sys.exit(3)
    sys.exit(1)
if args.device == "cuda" and not args.pluggable:
    # Through the pluggable hook PyTorch keeps no statistics of its own (memory_reserved raises);
    # monet's are printed at exit with MONET_STATS=1.
    print(f"torch reserved {torch.cuda.memory_reserved()} bytes, "
          f"device total as torch sees it {torch.cuda.mem_get_info()[1]} bytes", flush=True)
sys.exit(1 if args.expect_oom else 0)
