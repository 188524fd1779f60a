#!/usr/bin/env bash
# After curves.sh: the learn9 run's models at 10, 20, 30 and 40 minutes with 800 visits
# (PUCT) against GNU Go level 10, 10 games a point (a trend, not a measurement).
set -u
cd /work/main
R=/work/runs/s9
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
until grep -q "curves done" $R/drive.log; do sleep 10; done
log "curve learn9 v800"
$B/kgrpc-eval ladder --models $R/curve-learn9 --no-random --no-first --gnugo-levels 10 --games 10 --visits 800 --parallel 2 --out $R/ev-learn9-curve-v800 > $R/ev-learn9-curve-v800.log 2>&1
log "curve learn9 v800 rc=$?"
