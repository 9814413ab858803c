#!/usr/bin/env bash
# Starts monet-train on the CPU, sends it SIGSEGV a few seconds in (it reports crashes from its
# first line on), and prints what it wrote to stderr and its exit status (ctest matches them).
set -u
train=$1
err=$(mktemp)
"$train" --device cpu --steps 100000 --no-baseline --budget 512MiB > /dev/null 2> "$err" &
pid=$!
sleep 3
kill -SEGV "$pid"
wait "$pid"
status=$?
cat "$err"
echo "exit status $status"
rm -f "$err"
