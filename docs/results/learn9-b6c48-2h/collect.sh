#!/usr/bin/env bash
# Copy the s19 run's reports (learn9 in b6c48 for 2 hours on the AMX Xeon VM, int8 self-play,
# bf16 trainer) into docs/results/learn9-b6c48-2h/ (per run: ../collect_runs.sh).
set -eu
R=/work/runs/s19
D=/work/main/docs/results/learn9-b6c48-2h
mkdir -p $D
cp $R/drive.log $R/vmstat-mid.txt $D/
/work/main/docs/results/collect_runs.sh $R $D b6c48
