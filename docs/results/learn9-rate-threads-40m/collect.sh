#!/usr/bin/env bash
# Copy the s14 runs' reports (Adam's rate doubled, the profile as it is, one ONNX Runtime
# thread in the worker) into docs/results/learn9-rate-threads-40m/ (per run: ../collect_runs.sh).
set -eu
R=/work/runs/s14
D=/work/main/docs/results/learn9-rate-threads-40m
mkdir -p $D
cp $R/drive.sh $R/drive2.sh $R/collect.sh $R/drive.log $D/
/work/main/docs/results/collect_runs.sh $R $D lr2 plain intra1
