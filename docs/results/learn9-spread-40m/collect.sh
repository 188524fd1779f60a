#!/usr/bin/env bash
# Copy the s11 spread runs' reports into docs/results/learn9-spread-40m/ (per run:
# ../collect_runs.sh).
set -eu
R=/work/runs/s11
D=/work/main/docs/results/learn9-spread-40m
mkdir -p $D
cp $R/drive.sh $R/collect.sh $R/drive.log $D/
/work/main/docs/results/collect_runs.sh $R $D a b c
