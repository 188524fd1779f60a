#!/usr/bin/env bash
# After drive.sh: each run's models at 10, 20, 30 and 40 minutes alone (1 visit) against GNU Go
# level 10, 10 games a point (a trend, not a measurement); then, time allowing, at 800 visits.
set -u
cd /work/main
R=/work/runs/s9
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
until grep -q "all done" $R/drive.log; do sleep 20; done
for arm in all16 learn9; do
  cp $R/m40-$arm/* $R/curve-$arm/
  log "curve $arm v1"
  $B/kgrpc-eval ladder --models $R/curve-$arm --no-random --no-first --gnugo-levels 10 --games 10 --visits 1 --parallel 2 --out $R/ev-$arm-curve-v1 > $R/ev-$arm-curve-v1.log 2>&1
  log "curve $arm v1 rc=$?"
done
log "curves done"
