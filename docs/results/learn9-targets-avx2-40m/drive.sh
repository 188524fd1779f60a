#!/usr/bin/env bash
# Session 2026-12-06 (eighth), a 2-core AMD EPYC VM without an int8 dot product (AVX2 only,
# no VNNI: lscpu.txt), so learn9's --int8 auto is off here. First, without the loop, the two
# pace questions the runs' choice rests on (bench.txt): the trainer's samples/s at batch 128
# and 256 on its one torch thread (the loop gives it one), and self-play at fp32 against int8
# on this CPU. Then three 40-minute learn9 runs from random weights, each alone, one after
# the other: the short-term value target (short_value_weight=0.5), the profile as it is, the
# opponent-reply policy head (opponent_policy_weight=0.15); then each run's 40-minute model
# alone (1 visit) against GNU Go level 10, 100 games each.
set -u
cd /work/main
R=/work/runs/s15
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
lscpu > $R/lscpu.txt
log "bench at $(git rev-parse --short HEAD)"
{
  for b in 128 256; do
    echo "== OMP_NUM_THREADS=1 kgrpc-bench train --blocks 4 --channels 32 --board-size 9 --batch-size $b --steps 60 --warmup 5"
    OMP_NUM_THREADS=1 $B/kgrpc-bench train --blocks 4 --channels 32 --board-size 9 --batch-size $b --steps 60 --warmup 5 2>&1
  done
  for p in fp32 int8; do
    echo "== kgrpc-bench selfplay --model networks/kg-b4c32-s74741-d1195857.onnx --precision $p (9x9, 32 games, Gumbel, 32 visits, batch 32, one engine thread)"
    $B/kgrpc-bench selfplay --model networks/kg-b4c32-s74741-d1195857.onnx --board-size 9 --modes local --parallel-games 32 \
      --visits 32 --gumbel --max-batch 32 --precision $p --seconds 20 --intra-threads 1 2>&1
  done
} > $R/bench.txt 2>&1
log "bench done"
declare -A EXTRA
EXTRA[short]="--train short_value_weight=0.5"
EXTRA[plain]=""
EXTRA[opp]="--train opponent_policy_weight=0.15"
for name in short plain opp; do
  date +%s > $R/start-$name
  log "start $name at $(git rev-parse --short HEAD): kgrpc-cluster --profile learn9 ${EXTRA[$name]} --max-minutes 40 --final-ladder-games 0"
  $B/kgrpc-cluster --profile learn9 ${EXTRA[$name]} --max-minutes 40 --final-ladder-games 0 --view plain \
    --data-dir $R/$name > $R/cluster-$name.log 2>&1
  log "end $name rc=$?"
done
for name in short plain opp; do
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py $R/$name $(cat $R/start-$name) $R/m40-$name 40 >> $R/drive.log 2>&1
done
for name in short plain opp; do
  log "rate $name m40 v1"
  $B/kgrpc-eval ladder --models $R/m40-$name --no-random --no-first --gnugo-levels 10 --games 100 --visits 1 --parallel 2 --out $R/ev-$name-m40-v1 > $R/ev-$name-m40-v1.log 2>&1
  log "rated $name m40 rc=$?"
done
log "all done"
