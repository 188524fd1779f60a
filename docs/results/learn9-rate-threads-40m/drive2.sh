#!/usr/bin/env bash
# Session 2026-12-06 (seventh), second half of drive.sh: it was stopped while its first run
# (lr2) went on, and this takes over: it waits for that run, then runs the profile as it is
# and the profile with one ONNX Runtime thread in the worker (KGRPC_WORKER_INTRA_THREADS=1;
# the default, 0, takes one per core, two here, beside the trainer's one torch thread and the
# search's own thread), each alone for 40 minutes; then each run's 40-minute model alone
# (1 visit) against GNU Go level 10, 100 games each. The rate-tripled arm (lr3) of drive.sh
# was dropped for the thread arm before it started.
set -u
cd /work/main
R=/work/runs/s14
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
declare -A EXTRA ENVS
EXTRA[plain]=""
ENVS[plain]=""
EXTRA[intra1]=""
ENVS[intra1]="KGRPC_WORKER_INTRA_THREADS=1"
LR2_PID=$1
log "drive.sh stopped; drive2.sh waits for lr2 (pid $LR2_PID)"
while kill -0 "$LR2_PID" 2>/dev/null; do sleep 5; done
log "end lr2"
for name in plain intra1; do
  date +%s > $R/start-$name
  log "start $name at $(git rev-parse --short HEAD): ${ENVS[$name]} kgrpc-cluster --profile learn9 ${EXTRA[$name]} --max-minutes 40 --final-ladder-games 0"
  env ${ENVS[$name]} $B/kgrpc-cluster --profile learn9 ${EXTRA[$name]} --max-minutes 40 --final-ladder-games 0 --view plain \
    --data-dir $R/$name > $R/cluster-$name.log 2>&1
  log "end $name rc=$?"
done
for name in lr2 plain intra1; do
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
done
for name in lr2 plain intra1; do
  log "rate $name m40 v1"
  $B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
  log "rated $name m40 rc=$?"
done
log "all done"
