#!/usr/bin/env bash
# Copy the s12 runs' reports (lr cosine and policy-surprise arms and the profile as it is)
# into docs/results/learn9-levers-40m/ (per run: ../collect_runs.sh).
set -eu
R=/work/runs/s12
D=/work/main/docs/results/learn9-levers-40m
mkdir -p $D
cp $R/drive.sh $R/drive2.sh $R/collect.sh $R/drive.log $D/
/work/main/docs/results/collect_runs.sh $R $D cos plain surprise
