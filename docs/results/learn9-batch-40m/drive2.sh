#!/usr/bin/env bash
# s18: after run-wb128 (started by hand), the plain profile for 40 minutes, then both
# 40-minute models alone against GNU Go level 10 (100 games each, both at once, one game
# at a time each).
set -u
cd /work/main
R=/work/runs/s18
until grep -q "end wb128" $R/drive.log; do sleep 10; done
sleep 20  # the pick of wb128's model
docs/results/learn9_arm.sh run $R plain
docs/results/learn9_arm.sh rate $R wb128 --parallel 1 &
docs/results/learn9_arm.sh rate $R plain --parallel 1 &
wait
echo "$(date -u +%FT%TZ) all rated" >> $R/drive.log
