#!/usr/bin/env bash
# After the 2-hour b6c48 run (learn9_arm.sh run, MINUTES=120): the 40- and 120-minute models
# alone against GNU Go level 10 (100 games each, both at once, one game at a time each), then
# a curve: a model every 10 minutes, 10 games a point at one visit.
set -u
cd /work/main
R=/work/runs/s19 name=b6c48
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
until grep -q "120 min:" $R/drive.log; do sleep 15; done
AT=120 docs/results/learn9_arm.sh rate $R $name --parallel 1 &
AT=40 docs/results/learn9_arm.sh rate $R $name --parallel 1 &
wait
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name "$(cat $R/start-$name)" \
  $R/mcurve-$name 10 20 30 50 60 70 80 90 100 110 >> $R/drive.log 2>&1
cp $R/m40-$name/* $R/m120-$name/* $R/mcurve-$name/
log "curve v1, 10 games a point"
$B/kgrpc-eval ladder --models $R/mcurve-$name --no-random --no-first --gnugo-levels 10 --games 10 \
  --visits 1 --parallel 2 --out $R/ev-$name-curve-v1 > $R/ev-$name-curve-v1.log 2>&1
log "curve rc=$? all done"
