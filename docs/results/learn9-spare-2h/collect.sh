#!/usr/bin/env bash
# Copy the s22 run's reports (learn9 with one spare worker at nice 19, 2 hours on the AMX Xeon
# VM, int8 self-play, bf16 trainer) into docs/results/learn9-spare-2h/ (per run:
# ../collect_runs.sh).
set -eu
R=/work/runs/s22
D=/work/main/docs/results/learn9-spare-2h
mkdir -p $D
cp $R/drive.log $R/vmstat-mid.txt $R/ps-mid.txt $R/beside.txt $R/schedstat.sh $R/schedstat-mid.txt $D/
/work/main/docs/results/collect_runs.sh $R $D spare
