#!/usr/bin/env bash
# After drive.sh (curve.sh was dropped for time): the 120-minute model at 800 visits (PUCT) against GNU Go level 10, 40 games.
set -u
cd /work/main
R=/work/runs/s8
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
until grep -q "all done" $R/drive.log; do sleep 20; done
log "rate m120 v800"
$B/kgrpc-eval ladder --models $R/m120 --no-random --no-first --gnugo-levels 10 --games 40 --visits 800 --parallel 2 --out $R/ev-m120-v800 > $R/ev-m120-v800.log 2>&1
log "rated m120 v800 rc=$?"
