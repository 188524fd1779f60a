#!/usr/bin/env bash
# Session 2026-12-06 (seventh): Adam's rate for the 40-minute net-alone target. Three runs
# from random weights, one after the other, each alone on the machine for its 40 minutes: the
# learn9 profile with Adam's rate doubled (2e-3, a repeat of the sixth session's 51%), the
# profile as it is (1e-3), and the rate tripled (3e-3); then each run's 40-minute model alone
# (1 visit) against GNU Go level 10, 100 games each.
set -u
cd /work/main
R=/work/runs/s14
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
declare -A EXTRA
EXTRA[lr2]="--learning-rate 0.002"
EXTRA[plain]=""
EXTRA[lr3]="--learning-rate 0.003"
ORDER="lr2 plain lr3"
for name in $ORDER; do
  date +%s > $R/start-$name
  log "start $name at $(git rev-parse --short HEAD): kgrpc-cluster --profile learn9 ${EXTRA[$name]} --max-minutes 40 --final-ladder-games 0"
  $B/kgrpc-cluster --profile learn9 ${EXTRA[$name]} --max-minutes 40 --final-ladder-games 0 --view plain \
    --data-dir $R/$name > $R/cluster-$name.log 2>&1
  log "end $name rc=$?"
done
for name in $ORDER; do
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
done
for name in $ORDER; do
  log "rate $name m40 v1"
  $B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
  log "rated $name m40 rc=$?"
done
log "all done"
