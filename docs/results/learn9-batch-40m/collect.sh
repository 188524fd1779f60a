#!/usr/bin/env bash
# Copy the s18 runs' reports (learn9 for 40 minutes on the AMX Xeon VM: with --worker-batch
# 128, as profiled, and with --visits 16) into docs/results/learn9-batch-40m/ (per run:
# ../collect_runs.sh), with each worker's status lines (its mean net batch) and the
# session's drive log and scripts.
set -eu
R=/work/runs/s18
D=/work/main/docs/results/learn9-batch-40m
mkdir -p $D
cp $R/drive.log $R/drive2.sh $R/drive3.sh $R/maketest.sh $R/lscpu.txt $D/
/work/main/docs/results/collect_runs.sh $R $D wb128 plain v16
for arm in wb128 plain v16; do
  grep "kgrpc.worker.status" $R/$arm/logs/worker-1.log | cut -d' ' -f1,2,6- > $D/run-$arm/worker-status.txt
done
