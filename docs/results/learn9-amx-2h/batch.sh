#!/usr/bin/env bash
# The worker's net batch in the loop: kgrpc-cluster gives its in-process worker --max-batch
# = --parallel-games (32 in learn9), while its 32 games collect more leaves than that a step.
# Self-play of the run's 2-hour model (its int8 file), as learn9's worker plays it, at net
# batches of 32, 64 and 128, twice in turn. Run from the repository root on an idle machine.
set -eu
R=${1:-/work/runs/s17}
m=$R/profile2h/models/kg-b4c32-s99772-d1596365.onnx
for round in 1 2; do
  for batch in 32 64 128; do
    echo "== round $round, --max-batch $batch"
    .venv/bin/kgrpc-bench selfplay --model "$m" --board-size 9 --gumbel --visits 32 \
      --parallel-games 32 --max-batch "$batch" --precision int8 --modes local \
      --intra-threads 1 --seconds 20 | grep -E "^(raw|local|mode)"
  done
done
