#!/usr/bin/env bash
# Copy the s9 runs' reports into docs/results/learn9-every-move-40m/.
set -eu
R=/work/runs/s9
D=/work/main/docs/results/learn9-every-move-40m
mkdir -p $D
cp $R/drive.sh $R/collect.sh $R/drive.log $D/
cp $R/curves.sh $R/curve800.sh $R/drive2.sh $D/
for arm in all16 learn9; do
  [ -d $R/$arm ] || continue
  mkdir -p $D/$arm
  cp $R/$arm/cluster-summary.json $D/$arm/ 2>/dev/null || true
  cp $R/$arm/coordinator.toml $D/$arm/ 2>/dev/null || true
  grep -v -E '^\[[0-9:]+\] games [0-9]+ \(' $R/cluster-$arm.log > $D/$arm/cluster.log || true
  grep "int8 not written" $R/$arm/logs/trainer.log > $D/$arm/int8-refusals.txt || true
  rm -rf $D/$arm/in-run-ladder; mkdir -p $D/$arm/in-run-ladder
  cp $R/$arm/ladder/ladder.md $R/$arm/ladder/ladder.csv $R/$arm/ladder/ladder.png $D/$arm/in-run-ladder/ 2>/dev/null || true
  for ev in $R/ev-$arm-*; do
    [ -d $ev ] || continue
    n=$(basename $ev); n=${n#ev-$arm-}
    rm -rf $D/$arm/level10-$n; mkdir -p $D/$arm/level10-$n
    cp $ev/ladder.* $D/$arm/level10-$n/ 2>/dev/null || true
    [ -d $ev/matches ] && cp -r $ev/matches $D/$arm/level10-$n/
  done
done
du -sh $D
