#!/usr/bin/env bash
# Copy the reports of kgrpc-cluster runs (one data dir per arm, RUNS/ARM, with its log in
# RUNS/cluster-ARM.log and its ratings against GNU Go level 10 in RUNS/ev-ARM-WHAT, e.g.
# ev-ARM-m40-v1 for the 40-minute model at one visit) into DEST/run-ARM/ (level10-WHAT/):
# the log without its progress lines, the summary and settings, the int8 files written and
# refused, the trainer's generations and samples per row (trainer-steps.txt), each worker's
# first engine line (its precision and ONNX Runtime threads: worker-engine.txt) and the games
# its uploads had accepted (worker-games.txt: a spare worker's share), the in-run
# ladder, the rating's tables and games. Each results folder's collect.sh calls this with
# its own runs.
#   collect_runs.sh RUNS DEST ARM...
set -eu
R=$1 D=$2
shift 2
for arm in "$@"; do
  A=$D/run-$arm
  rm -rf "$A"; mkdir -p "$A"
  cp "$R/$arm/cluster-summary.json" "$R/$arm/coordinator.toml" "$A/" 2>/dev/null || true
  grep -v -E '^\[[0-9:]+\] games [0-9]+ \(' "$R/cluster-$arm.log" > "$A/cluster.log" || true
  grep "int8 not written" "$R/$arm/logs/trainer.log" > "$A/int8-refusals.txt" || true
  grep -E "^(generation [0-9]+:|trained to step)" "$R/$arm/logs/trainer.log" > "$A/trainer-steps.txt" || true
  : > "$A/worker-engine.txt"; : > "$A/worker-games.txt"
  for wlog in "$R/$arm"/logs/worker-*.log; do
    [ -f "$wlog" ] || continue
    w=$(basename "$wlog" .log)
    grep -m1 "intra-op threads" "$wlog" | sed "s/^/$w: /" >> "$A/worker-engine.txt" || true
    grep -o "uploaded [0-9]* games: [0-9]* accepted" "$wlog" \
      | awk -v w="$w" '{n += $4} END {print w ": " n + 0 " games accepted"}' >> "$A/worker-games.txt"
  done
  (cd "$R/$arm/models" && ls | grep '\.int8\.onnx$' || true) > "$A/int8-written.txt"
  mkdir -p "$A/in-run-ladder"
  cp "$R/$arm"/ladder/ladder.{md,csv,png} "$A/in-run-ladder/" 2>/dev/null || true
  for ev in "$R/ev-$arm"-*/; do
    [ -d "$ev" ] || continue
    ev=${ev%/} what=${ev##*/ev-$arm-}
    mkdir -p "$A/level10-$what"
    cp "$ev"/ladder.* "$A/level10-$what/" 2>/dev/null || true
    [ -d "$ev/matches" ] && cp -r "$ev/matches" "$A/level10-$what/"
  done
done
du -sh "$D"
