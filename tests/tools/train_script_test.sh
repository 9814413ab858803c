#!/usr/bin/env bash
# scripts/train from another folder: monet-train must run in the folder it was started in, so that
# a relative --trace FILE lands there. A copy of the script runs in a tree of stand-ins (the
# install step, cmake, and a monet-train that says where it runs), built in the folder given.
set -euo pipefail
script=$1
tree=$2/train-script
rm -rf "$tree"
mkdir -p "$tree/scripts" "$tree/build/tools" "$tree/bin" "$tree/elsewhere"
cp "$script" "$tree/scripts/train"
printf '#!/bin/sh\n' > "$tree/scripts/install-deps.sh"
printf '#!/bin/sh\n' > "$tree/bin/cmake"
printf '#!/bin/sh\necho "monet-train ran in [$PWD] with [$*]"\n' > "$tree/build/tools/monet-train"
chmod +x "$tree/scripts/train" "$tree/scripts/install-deps.sh" "$tree/bin/cmake" \
  "$tree/build/tools/monet-train"
cd "$tree/elsewhere"
PATH="$tree/bin:$PATH" "$tree/scripts/train" --trace t.trace
