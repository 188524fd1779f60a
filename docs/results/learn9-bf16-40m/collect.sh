#!/usr/bin/env bash
# Copy the s16 runs' reports (the profile as it is; bf16 autocast with channels-last order in
# the trainer; the AMX Xeon VM, int8 self-play) into docs/results/learn9-bf16-40m/ (per
# run: ../collect_runs.sh), with the trainer bench that ran between them.
set -eu
R=/work/runs/s16
D=/work/main/docs/results/learn9-bf16-40m
mkdir -p $D
cp $R/drive.sh $R/rate2.sh $R/collect.sh $R/drive.log $R/bench.txt $R/lscpu.txt $D/
/work/main/docs/results/collect_runs.sh $R $D "$@"
