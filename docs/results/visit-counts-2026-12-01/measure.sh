#!/usr/bin/env bash
# Self-play of the random and the GNU Go-trained b6c96 19x19 nets, and of the demo's random and
# trained b2c32 9x9 nets: each ratio against raw ONNX Runtime measured in the same run.
set -euo pipefail
cd /work/main
OUT=${OUT:-/work/exp/gnugo19/runs}
mkdir -p "$OUT"
for i in 1 2; do
  for net in random:bench-out/b6c96-19.onnx trained:/work/exp/gnugo19/trained.onnx; do
    name=${net%%:*}; path=${net#*:}
    .venv/bin/kgrpc-bench selfplay --model "$path" --board-size 19 --modes local \
      --parallel-games 32 --seconds 60 --json "$OUT/b6c96-19-$name-$i.json" 2>&1 | tee "$OUT/b6c96-19-$name-$i.txt"
  done
done
for i in 1 2; do
  for net in random:/tmp/ciclone/demo-data/models/kg-b2c32-s0-d0.onnx trained:/tmp/ciclone/demo-data/models/kg-b2c32-s1200-d33841.onnx; do
    name=${net%%:*}; path=${net#*:}
    .venv/bin/kgrpc-bench selfplay --model "$path" --board-size 9 --modes local \
      --parallel-games 16 --seconds 20 --json "$OUT/b2c32-9-$name-$i.json" 2>&1 | tee "$OUT/b2c32-9-$name-$i.txt"
  done
done
