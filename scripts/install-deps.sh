#!/usr/bin/env bash
# Installs what monet builds, tests and runs with, from Debian's archive, and the packages named
# as arguments. Idempotent: packages already present are left as they are, and apt is not touched
# when nothing is missing.
set -euo pipefail

# libopenblas0-serial: Debian's LibTorch multiplies matrices through whichever libblas.so.3
# update-alternatives names, the reference BLAS unless an optimised one is installed. OpenBLAS's
# serial build is several times faster and starts no threads of its own, so ATen's intra-op
# threads are the only ones (a threaded BLAS inside them would oversubscribe the cores, and the
# predictor's tests time each stage as its thread's CPU time).
packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas0-serial libfmt-dev libboost-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-torchvision
)
packages+=("$@")  # what a script needs besides (scripts/fuzz: clang and its runtimes)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
