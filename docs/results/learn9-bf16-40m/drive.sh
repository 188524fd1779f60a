#!/usr/bin/env bash
# Session 2026-12-07 (ninth), a 2-core Intel Xeon VM with AVX-512 VNNI and AMX (lscpu.txt),
# so learn9's --int8 auto is on. The plain arm was started first on its own
# (docs/results/learn9_arm.sh run R plain, at fd3020d); this script waits for it, then
# measures the trainer's step with and without bf16 autocast and channels-last order
# (bench.txt: kgrpc-bench train, the learn9 net b4c32 9x9 at batch 128 on one torch
# thread, as the loop gives the trainer), then runs the bf16 + channels-last arm.
set -u
cd /work/main
R=/work/runs/s16
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> $R/drive.log; }
while pgrep -f "learn9_arm.sh run $R plain" > /dev/null; do sleep 10; done
log "bench at $(git rev-parse --short HEAD)"
{
  for rep in 1 2; do
    for a in "" "--channels-last" "--autocast bf16" "--autocast bf16 --channels-last"; do
      echo "== OMP_NUM_THREADS=1 kgrpc-bench train --blocks 4 --channels 32 --board-size 9 --batch-size 128 --steps 100 --warmup 10 $a"
      OMP_NUM_THREADS=1 $B/kgrpc-bench train --blocks 4 --channels 32 --board-size 9 --batch-size 128 --steps 100 --warmup 10 $a 2>&1
    done
  done
} > $R/bench.txt 2>&1
log "bench done"
docs/results/learn9_arm.sh run $R bf16cl --train autocast=bf16 --train channels_last=true
log "arms done"
