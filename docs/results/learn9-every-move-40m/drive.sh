#!/usr/bin/env bash
# Session 2026-12-06 (second): two 40-minute runs from random weights, one after the other,
# each alone on the machine, then each run's 40-minute model alone (1 visit) against GNU Go
# level 10, 100 games.
#  A "all16": every move a 16-visit Gumbel search that becomes a training row
#    (full_search_prob 1.0); samples_per_row, min_new_rows and the window's c scaled by the
#    4x rows per move so the CPU split, generation cadence and window in games stay learn9's.
#  B "learn9": the profile as it is.
set -u
cd /work/main
R=/work/runs/s9
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
run_arm() {  # name, extra flags...
  local name=$1; shift
  date +%s > $R/start-$name
  log "start $name at $(git rev-parse --short HEAD): $*"
  $B/kgrpc-cluster --profile learn9 --max-minutes 40 --final-ladder-games 0 --view plain \
    --data-dir $R/$name "$@" > $R/cluster-$name.log 2>&1
  log "end $name rc=$?"
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/curve-$name 10 20 30 >> $R/drive.log 2>&1
  log "rate $name m40 v1"
  $B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
  log "rated $name rc=$?"
}
run_arm all16 --visits 16 --coord full_search_prob=1.0 --train samples_per_row=2 \
  --train window_min_rows=100000 --min-new-rows 10000
run_arm learn9
log "all done"
