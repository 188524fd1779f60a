#!/usr/bin/env bash
# Session 2026-12-06 (fifth), second part: the policy-surprise arm, 40 minutes from random
# weights alone on the machine (beside it: documentation edits only), then its 40-minute
# model alone (1 visit) against GNU Go level 10, 100 games.
set -u
cd /work/main
R=/work/runs/s12
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
name=surprise
date +%s > $R/start-$name
log "start $name at $(git rev-parse --short HEAD): kgrpc-cluster --profile learn9 --train policy_surprise_weight=0.5 --max-minutes 40 --final-ladder-games 0"
$B/kgrpc-cluster --profile learn9 --train policy_surprise_weight=0.5 --max-minutes 40 --final-ladder-games 0 --view plain \
  --data-dir $R/$name > $R/cluster-$name.log 2>&1
log "end $name rc=$?"
$B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
log "rate $name m40 v1"
$B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
log "rated $name m40 rc=$?"
log "all done (2)"
