#!/usr/bin/env bash
# Copy the s20 run's reports (learn9 with a late learning-rate drop, 2 hours on the AMX Xeon
# VM, int8 self-play, bf16 trainer) into docs/results/learn9-drop-2h/ (per run:
# ../collect_runs.sh).
set -eu
R=/work/runs/s20
D=/work/main/docs/results/learn9-drop-2h
mkdir -p $D
cp $R/drive.log $R/vmstat-mid.txt $D/
/work/main/docs/results/collect_runs.sh $R $D drop
