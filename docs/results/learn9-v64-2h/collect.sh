#!/usr/bin/env bash
# Copy the s21 run's reports (learn9 with full searches of 64 visits, 2 hours on the AMX Xeon
# VM, int8 self-play, bf16 trainer) into docs/results/learn9-v64-2h/ (per run:
# ../collect_runs.sh).
set -eu
R=/work/runs/s21
D=/work/main/docs/results/learn9-v64-2h
mkdir -p $D
cp $R/drive.log $R/vmstat-mid.txt $R/ps-mid.txt $D/
/work/main/docs/results/collect_runs.sh $R $D v64
