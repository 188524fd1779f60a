#!/usr/bin/env bash
# What a larger net costs on this CPU, the loop's way: self-play as learn9's worker plays it
# (Gumbel, 32 visits, 32 games, int8 where the CPU has an int8 dot product, one engine thread)
# and the trainer's step as learn9 trains (batch 128, one torch thread, autocast auto,
# channels-last). Random nets (kgrpc-train init; the bench makes the int8 file, calibrated on
# random-game positions); run from the repository root on an idle machine.
set -eu
out=${1:-/tmp/netsize}
B=.venv/bin
shapes="b4c32 b6c32 b4c48 b6c48 b6c64"
for s in $shapes; do
  b=${s#b}; b=${b%c*}; c=${s#*c}
  $B/kgrpc-train init --board-size 9 --blocks "$b" --channels "$c" --out "$out/kg-$s-s0-d0.onnx"
  echo "== $s self-play: kgrpc-bench selfplay --gumbel --visits 32 --parallel-games 32 --precision int8 --intra-threads 1"
  $B/kgrpc-bench selfplay --model "$out/kg-$s-s0-d0.onnx" --board-size 9 --gumbel --visits 32 \
    --parallel-games 32 --max-batch 64 --precision int8 --modes local --intra-threads 1 --seconds 20
  echo "== $s trainer: OMP_NUM_THREADS=1 kgrpc-bench train --autocast auto --channels-last"
  OMP_NUM_THREADS=1 $B/kgrpc-bench train --blocks "$b" --channels "$c" --board-size 9 \
    --batch-size 128 --steps 60 --warmup 10 --autocast auto --channels-last
done
