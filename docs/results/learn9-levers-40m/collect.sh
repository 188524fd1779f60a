#!/usr/bin/env bash
# Copy the s12 runs' reports (lr cosine and policy-surprise arms and the profile as it is) into
# docs/results/learn9-levers-40m/.
set -eu
R=/work/runs/s12
D=/work/main/docs/results/learn9-levers-40m
mkdir -p $D
cp $R/drive.sh $R/collect.sh $R/drive.log $D/
for arm in cos plain surprise; do
  A=$D/run-$arm
  rm -rf $A; mkdir -p $A
  cp $R/$arm/cluster-summary.json $R/$arm/coordinator.toml $A/ 2>/dev/null || true
  grep -v -E '^\[[0-9:]+\] games [0-9]+ \(' $R/cluster-$arm.log > $A/cluster.log || true
  grep "int8 not written" $R/$arm/logs/trainer.log > $A/int8-refusals.txt || true
  mkdir -p $A/in-run-ladder
  cp $R/$arm/ladder/ladder.md $R/$arm/ladder/ladder.csv $R/$arm/ladder/ladder.png $A/in-run-ladder/ 2>/dev/null || true
  ev=$R/ev-$arm-m40-v1
  if [ -d $ev ]; then
    mkdir -p $A/level10-m40-v1
    cp $ev/ladder.* $A/level10-m40-v1/ 2>/dev/null || true
    [ -d $ev/matches ] && cp -r $ev/matches $A/level10-m40-v1/
  fi
done
du -sh $D
