#!/usr/bin/env bash
# Past the opening: 8 games (so each gets 4x the visits/s of 32 games and passes move 30, where
# the temperature phase ends, in about two minutes), a 7-minute window, batch 32 (the raw figure
# is measured at the same batch).
set -euo pipefail
cd /work/main
OUT=${OUT:-/work/exp/gnugo19/runs}
for net in trained:/work/exp/gnugo19/trained.onnx random:bench-out/b6c96-19.onnx; do
  name=${net%%:*}; path=${net#*:}
  .venv/bin/kgrpc-bench selfplay --model "$path" --board-size 19 --modes local \
    --parallel-games 8 --max-batch 32 --seconds 420 --json "$OUT/long-b6c96-19-$name.json" 2>&1 | tee "$OUT/long-b6c96-19-$name.txt"
done
# A second run of the trained net, after the two above.
net=/work/exp/gnugo19/trained.onnx
.venv/bin/kgrpc-bench selfplay --model "$net" --board-size 19 --modes local \
  --parallel-games 8 --max-batch 32 --seconds 420 --json "$OUT/long-b6c96-19-trained-2.json" 2>&1 | tee "$OUT/long-b6c96-19-trained-2.txt"
