#!/usr/bin/env bash
# Copy the s15 runs' reports (short-term value target, the profile as it is, opponent-reply
# policy head; the AVX2 VM, fp32 self-play) into docs/results/learn9-targets-avx2-40m/
# (per run: ../collect_runs.sh), with the pace bench that came first.
set -eu
R=/work/runs/s15
D=/work/main/docs/results/learn9-targets-avx2-40m
mkdir -p $D
cp $R/drive.sh $R/collect.sh $R/drive.log $R/bench.txt $R/lscpu.txt $D/
/work/main/docs/results/collect_runs.sh $R $D short plain opp
