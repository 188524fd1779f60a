#!/usr/bin/env bash
# Copy the s13 runs' reports (Adam's rate doubled, the profile as it is, 16 samples per row)
# into docs/results/learn9-rate-ratio-40m/ (per run: ../collect_runs.sh).
set -eu
R=/work/runs/s13
D=/work/main/docs/results/learn9-rate-ratio-40m
mkdir -p $D
cp $R/drive.sh $R/collect.sh $R/drive.log $D/
/work/main/docs/results/collect_runs.sh $R $D lr2 plain spr16
