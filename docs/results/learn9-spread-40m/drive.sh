#!/usr/bin/env bash
# Session 2026-12-06 (fourth): how far runs of one recipe spread. Three runs of the learn9
# profile as it is, 40 minutes each from random weights, one after the other, each alone on
# the machine; then each run's 40-minute model alone (1 visit) against GNU Go level 10, 100
# games each.
set -u
cd /work/main
R=/work/runs/s11
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
for name in a b c; do
  date +%s > $R/start-$name
  log "start $name at $(git rev-parse --short HEAD): kgrpc-cluster --profile learn9 --max-minutes 40 --final-ladder-games 0"
  $B/kgrpc-cluster --profile learn9 --max-minutes 40 --final-ladder-games 0 --view plain \
    --data-dir $R/$name > $R/cluster-$name.log 2>&1
  log "end $name rc=$?"
done
for name in a b c; do
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
done
for name in a b c; do
  log "rate $name m40 v1"
  $B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
  log "rated $name m40 rc=$?"
done
log "all done"
