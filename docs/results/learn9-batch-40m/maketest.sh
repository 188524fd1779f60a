#!/usr/bin/env bash
# s18: make test on the committed tree once run-plain has ended (beside the two ratings,
# whose moves a load does not change), then the marker drive3.sh waits for.
cd /work/main
R=/work/runs/s18
until grep -q "end plain" $R/drive.log; do sleep 10; done
sleep 30
echo "$(date -u +%FT%TZ) make test at $(git rev-parse --short HEAD)" >> $R/drive.log
make test > $R/maketest.log 2>&1
echo "$(date -u +%FT%TZ) make test rc=$?" >> $R/drive.log
touch $R/maketest.done
