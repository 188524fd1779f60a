#!/usr/bin/env bash
# After the two runs: both 40-minute models alone against GNU Go level 10 at once (each
# --parallel 1; at a fixed visit count the load changes no game).
set -u
cd /work/main
R=/work/runs/s16
while pgrep -f "drive.sh" > /dev/null; do sleep 5; done
docs/results/learn9_arm.sh rate $R plain --parallel 1 &
docs/results/learn9_arm.sh rate $R bf16cl --parallel 1 &
wait
