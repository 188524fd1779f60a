#!/usr/bin/env bash
# Copy the s17 run's reports (learn9 for 2 hours on the AMX Xeon VM, int8 self-play, bf16
# trainer) into docs/results/learn9-amx-2h/ (per run: ../collect_runs.sh), with the net-size
# bench that ran after it.
set -eu
R=/work/runs/s17
D=/work/main/docs/results/learn9-amx-2h
mkdir -p $D
cp $R/after.sh $R/collect.sh $R/drive.log $R/bench-netsize.txt $R/bench-batch.txt $R/lscpu.txt $R/vmstat-mid.txt $D/
/work/main/docs/results/collect_runs.sh $R $D "$@"
