#!/usr/bin/env bash
# Copy the s8 run's reports into docs/results/learn9-gumbel-2h/.
set -eu
R=/work/runs/s8
D=/work/main/docs/results/learn9-gumbel-2h
mkdir -p $D/level10
cp $R/drive.sh $R/v800.sh $R/collect.sh $R/drive.log $D/
cp $R/l9-gumbel-2h/cluster-summary.json $D/
cp $R/l9-gumbel-2h/coordinator.toml $D/ 2>/dev/null || true
grep -v -E '^\[[0-9:]+\] games [0-9]+ \(' $R/cluster.log > $D/cluster.log
rm -rf $D/in-run-ladder; mkdir -p $D/in-run-ladder
cp $R/l9-gumbel-2h/ladder/ladder.md $R/l9-gumbel-2h/ladder/ladder.csv $R/l9-gumbel-2h/ladder/ladder.png $D/in-run-ladder/ 2>/dev/null || true
for ev in m120-v1 m40-v1 curve-v1 m120-v800; do
  if [ -d $R/ev-$ev ]; then
    rm -rf $D/level10/$ev; mkdir -p $D/level10/$ev
    cp $R/ev-$ev/ladder.* $D/level10/$ev/ 2>/dev/null || true
    [ -d $R/ev-$ev/matches ] && cp -r $R/ev-$ev/matches $D/level10/$ev/
  fi
done
du -sh $D
