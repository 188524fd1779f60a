#!/usr/bin/env bash
# s18, third arm: once the pair is rated and make test is done (the marker file), learn9 with
# 16-visit full searches (cheap ones stay 8) for 40 minutes alone, then its 40-minute model
# alone against GNU Go level 10 (100 games, two at a time).
set -u
cd /work/main
R=/work/runs/s18
until grep -q "all rated" $R/drive.log && [ -e $R/maketest.done ]; do sleep 10; done
docs/results/learn9_arm.sh run $R v16 --visits 16
docs/results/learn9_arm.sh rate $R v16 --parallel 2
echo "$(date -u +%FT%TZ) v16 rated" >> $R/drive.log
