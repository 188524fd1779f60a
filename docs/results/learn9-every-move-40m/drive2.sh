#!/usr/bin/env bash
# The second arm of drive.sh again, alone on the machine: its first start (05:48) overlapped
# the end of a `make test` and was stopped after 3.5 minutes.
set -u
cd /work/main
R=/work/runs/s9
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
until grep -q "^rc=" $R/make-test.log; do sleep 10; done
sleep 20
name=learn9
date +%s > $R/start-$name
log "start $name at $(git rev-parse --short HEAD): (the profile as it is)"
$B/kgrpc-cluster --profile learn9 --max-minutes 40 --final-ladder-games 0 --view plain \
  --data-dir $R/$name > $R/cluster-$name.log 2>&1
log "end $name rc=$?"
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/curve-$name 10 20 30 >> $R/drive.log 2>&1
log "rate $name m40 v1"
$B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
log "rated $name rc=$?"
log "all done"
