#!/usr/bin/env bash
# PUCT (learn9) against Gumbel (learn9-gumbel), 40 minutes each, one after the other, alone on
# the machine; then the 40-minute model of each alone (1 visit) against GNU Go level 10, 100 games;
# then the curve at 1 visit, 10 games a point.
set -u
cd /work/main
R=/work/runs/s7
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
for arm in puct gumbel; do
  prof=learn9; [ $arm = gumbel ] && prof=learn9-gumbel
  date +%s > $R/start-$arm
  log "start $arm ($prof) at $(git rev-parse --short HEAD)"
  $B/kgrpc-cluster --profile $prof --max-minutes 40 --final-ladder-games 0 \
    --data-dir $R/l9-$arm --view plain > $R/cluster-$arm.log 2>&1
  log "end $arm rc=$?"
done
for arm in puct gumbel; do
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/l9-$arm $(cat $R/start-$arm) $R/$arm-m40 40 >> $R/drive.log 2>&1
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/l9-$arm $(cat $R/start-$arm) $R/$arm-curve 10 20 30 40 >> $R/drive.log 2>&1
done
for arm in puct gumbel; do
  log "rate $arm m40 v1"
  $B/kgrpc-eval ladder --models $R/$arm-m40 --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$arm-m40-v1 > $R/ev-$arm-m40-v1.log 2>&1
  log "rated $arm rc=$?"
done
for arm in puct gumbel; do
  log "curve $arm"
  $B/kgrpc-eval ladder --models $R/$arm-curve --no-random --no-first --gnugo-levels 10 --games 10 --visits 1 --parallel 2 --out $R/ev-$arm-curve-v1 > $R/ev-$arm-curve-v1.log 2>&1
  log "curve $arm rc=$?"
done
log "all done"
