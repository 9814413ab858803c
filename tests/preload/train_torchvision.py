"""Trains a torchvision ResNet-18 for a few steps on random images of varying size.

Run it under libmonet_preload.so. With --expect-oom the budget is meant to be too small: the
script then checks that the training ends in PyTorch's OutOfMemoryError carrying monet's message
and exits 3; any other ending is a failure.
"""
import argparse
import sys

import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--expect-oom", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(2)
model = torchvision.models.resnet18(num_classes=10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    for step in range(args.steps):
        side = (64, 96, 80)[step % 3]
        images = torch.randn(args.batch, 3, side, side)
        labels = torch.randint(0, 10, (args.batch,))
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} side {side} loss {loss.item():.4f}", flush=True)
except torch.cuda.OutOfMemoryError as e:
    message = str(e)
    print(f"OutOfMemoryError: {message.splitlines()[0]}", flush=True)
    if args.expect_oom and "monet: out of memory on cpu" in message and "MONET_BUDGET" in message:
        sys.exit(3)
    sys.exit(1)
sys.exit(1 if args.expect_oom else 0)
