#!/usr/bin/env bash
# Session 2026-12-06 (seventh): self-play rate of the plain run's 40-minute model (its int8
# file, as the loop plays it) with the worker's two thread settings, one ONNX Runtime thread
# and one per core (two here), each alone and beside one busy process (a spinning Python
# loop standing in for the trainer's one torch thread), one after the other. The loop's
# shape: 9x9, 32 games at once, Gumbel, at batch 32; 32 visits (a full search) and 8 (a cheap one).
set -u
cd /work/main
R=/work/runs/s14
M=$(ls $R/m40-plain/*.onnx | head -1)
M=$R/plain/models/$(basename $M)
B=.venv/bin
for rep in 1; do
  for load in alone beside-busy; do
    for visits in 32 8; do
      for threads in 1 0; do
        hog=""
        if [ $load = beside-busy ]; then .venv/bin/python -c "while True: pass" & hog=$!; fi
        out=$R/pace/$rep-$load-v$visits-t$threads.json
        mkdir -p $R/pace
        (sleep 12; vmstat 2 5 > ${out%.json}.vmstat) &
        $B/kgrpc-bench selfplay --model $M --board-size 9 --modes local --parallel-games 32 \
          --visits $visits --gumbel --max-batch 32 --precision int8 --seconds 15 \
          --intra-threads $threads --json $out > ${out%.json}.txt 2>&1
        [ -n "$hog" ] && kill $hog
        echo "$rep $load visits $visits threads $threads: $(python3 -c "import json;d=json.load(open('$out'));print(round(d['visits_per_s']), 'visits/s')")"
      done
    done
  done
done
