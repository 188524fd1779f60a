#!/usr/bin/env bash
# Copy the s18 runs' reports (learn9 for 40 minutes with --worker-batch 128 and as profiled,
# on the AMX Xeon VM) into docs/results/learn9-batch-40m/ (per run: ../collect_runs.sh), with
# each worker's status lines (its mean net batch) and the session's drive log.
set -eu
R=/work/runs/s18
D=/work/main/docs/results/learn9-batch-40m
mkdir -p $D
cp $R/drive.log $R/drive2.sh $R/lscpu.txt $D/
/work/main/docs/results/collect_runs.sh $R $D wb128 plain
for arm in wb128 plain; do
  grep "kgrpc.worker.status" $R/$arm/logs/worker-1.log | cut -d' ' -f1,2,6- > $D/run-$arm/worker-status.txt
done
