#!/usr/bin/env bash
# learn9-gumbel for 2 hours from random weights, alone on the machine; then the 120- and
# 40-minute models alone (1 visit) against GNU Go level 10, 100 games each.
set -u
cd /work/main
R=/work/runs/s8
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
date +%s > $R/start
log "start learn9-gumbel 120 min at $(git rev-parse --short HEAD)"
$B/kgrpc-cluster --profile learn9-gumbel --max-minutes 120 --final-ladder-games 0 \
  --data-dir $R/l9-gumbel-2h --view plain > $R/cluster.log 2>&1
log "end rc=$?"
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/l9-gumbel-2h $(cat $R/start) $R/m120 120 >> $R/drive.log 2>&1
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/l9-gumbel-2h $(cat $R/start) $R/m40 40 >> $R/drive.log 2>&1
for m in m120 m40; do
  log "rate $m v1"
  $B/kgrpc-eval ladder --models $R/$m --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$m-v1 > $R/ev-$m-v1.log 2>&1
  log "rated $m rc=$?"
done
log "all done"
