#!/usr/bin/env bash
# Copy the s7 runs' reports into docs/results/learn9-puct-gumbel-40m/.
set -eu
R=/work/runs/s7
D=/work/main/docs/results/learn9-puct-gumbel-40m
mkdir -p $D
cp $R/drive.sh $D/drive.sh
for arm in puct gumbel; do
  A=$D/$arm; mkdir -p $A/level10
  cp $R/l9-$arm/cluster-summary.json $A/
  cp $R/l9-$arm/coordinator.toml $A/ 2>/dev/null || true
  grep -v -E '^\[[0-9:]+\] games [0-9]+ \(' $R/cluster-$arm.log > $A/cluster.log
  rm -rf $A/in-run-ladder; mkdir -p $A/in-run-ladder
  cp $R/l9-$arm/ladder/ladder.md $R/l9-$arm/ladder/ladder.csv $R/l9-$arm/ladder/ladder.png $A/in-run-ladder/ 2>/dev/null || true
  for ev in m40-v1 curve-v1 m20-v800; do
    if [ -d $R/ev-$arm-$ev ]; then
      rm -rf $A/level10/$ev; mkdir -p $A/level10/$ev
      cp $R/ev-$arm-$ev/ladder.* $A/level10/$ev/ 2>/dev/null || true
      [ -d $R/ev-$arm-$ev/matches ] && cp -r $R/ev-$arm-$ev/matches $A/level10/$ev/
    fi
  done
done
du -sh $D
