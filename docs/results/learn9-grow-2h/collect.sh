#!/usr/bin/env bash
# Copy the s10 growth run's reports into docs/results/learn9-grow-2h/.
set -eu
R=/work/runs/s10
D=/work/main/docs/results/learn9-grow-2h
arm=grow
mkdir -p $D
cp $R/drive.sh $R/collect.sh $R/drive.log $D/
cp $R/$arm/cluster-summary.json $R/$arm/coordinator.toml $D/ 2>/dev/null || true
grep -v -E '^\[[0-9:]+\] games [0-9]+ \(' $R/cluster-$arm.log > $D/cluster.log || true
grep "int8 not written" $R/$arm/logs/trainer.log > $D/int8-refusals.txt || true
grep -E '^\[(3[0-9]|4[0-9]|50):[0-9]+\] games [0-9]+ \(' $R/cluster-$arm.log > $D/progress-30-50m.txt || true
grep "grew the net" $R/$arm/logs/trainer.log > $D/growth.txt || true
rm -rf $D/in-run-ladder; mkdir -p $D/in-run-ladder
cp $R/$arm/ladder/ladder.md $R/$arm/ladder/ladder.csv $R/$arm/ladder/ladder.png $D/in-run-ladder/ 2>/dev/null || true
for ev in $R/ev-$arm-*; do
  [ -d $ev ] || continue
  n=$(basename $ev); n=${n#ev-$arm-}
  rm -rf $D/level10-$n; mkdir -p $D/level10-$n
  cp $ev/ladder.* $D/level10-$n/ 2>/dev/null || true
  [ -d $ev/matches ] && cp -r $ev/matches $D/level10-$n/
done
du -sh $D
