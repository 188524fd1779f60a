#!/usr/bin/env bash
# After the 2-hour 64-visit run (learn9_arm.sh run, MINUTES=120, --visits 64): the 40- and
# 120-minute models alone against GNU Go level 10 (100 games each, both at once, one game at
# a time each), then the 10-minute curve (learn9_arm.sh curve: 10 games a point at one visit).
set -u
cd /work/main
R=/work/runs/s21 name=v64
until grep -q "120 min:" $R/drive.log; do sleep 15; done
AT=120 docs/results/learn9_arm.sh rate $R $name --parallel 1 &
AT=40 docs/results/learn9_arm.sh rate $R $name --parallel 1 &
wait
docs/results/learn9_arm.sh curve $R $name
echo "$(date -u +%FT%TZ) all done" >> $R/drive.log
