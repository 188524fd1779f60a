#!/usr/bin/env bash
# The growth run's net alone against GNU Go level 10 at 20, 60, 80 and 100 minutes, 10 games
# a point (a trend, not a measurement), after drive.sh's two 100-game ratings.
set -u
cd /work/main
R=/work/runs/s10
until grep -q "all done" $R/drive.log; do sleep 10; done
echo "$(date -u +%FT%TZ) curve start" >> $R/drive.log
.venv/bin/kgrpc-eval ladder --models $R/curve-grow --no-random --no-first --gnugo-levels 10 \
  --games 10 --visits 1 --parallel 2 --out $R/ev-grow-curve-v1 > $R/ev-grow-curve-v1.log 2>&1
echo "$(date -u +%FT%TZ) curve end rc=$?" >> $R/drive.log
