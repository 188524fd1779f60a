#!/usr/bin/env bash
# Session 2026-12-06 (third): the growth arm for 2 hours from random weights, alone on the
# machine: learn9 as profiled, continued in b6c48 once the data has 400,000 rows (about the
# 40-minute mark of the 40-minute learn9 runs), then its 40- and 120-minute models alone
# (1 visit) against GNU Go level 10, 100 games each.
set -u
cd /work/main
R=/work/runs/s10
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
name=grow
date +%s > $R/start-$name
log "start $name at $(git rev-parse --short HEAD): --train grow_schedule=b6c48@400000"
$B/kgrpc-cluster --profile learn9 --max-minutes 120 --final-ladder-games 0 --view plain \
  --train grow_schedule=b6c48@400000 --data-dir $R/$name > $R/cluster-$name.log 2>&1
log "end $name rc=$?"
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m120-$name 120 >> $R/drive.log 2>&1
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/curve-$name 20 60 80 100 >> $R/drive.log 2>&1
for m in m120 m40; do
  log "rate $name $m v1"
  $B/kgrpc-eval ladder --models $R/$m-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-$m-v1 > $R/ev-$name-$m-v1.log 2>&1
  log "rated $name $m rc=$?"
done
log "all done"
