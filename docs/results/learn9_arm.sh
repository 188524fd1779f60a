#!/usr/bin/env bash
# One arm of a 40-minute learn9 comparison, the steps every results folder since 2026-12-06
# repeated in its own drive.sh:
#   learn9_arm.sh run  RUNS NAME [kgrpc-cluster flags...]   # the run from random weights,
#       its data in RUNS/NAME, log in RUNS/cluster-NAME.log, start time in RUNS/start-NAME,
#       then its 40-minute model picked into RUNS/m40-NAME (pick_models.py)
#   learn9_arm.sh rate RUNS NAME [--parallel N]             # that model alone (one visit)
#       against GNU Go level 10, 100 games, into RUNS/ev-NAME-m40-v1
# MINUTES=120 (whole minutes) runs 120 minutes instead of 40 and picks RUNS/m120-NAME beside
# RUNS/m40-NAME (a shorter run picks only its last); AT=120 rates that
# model (into RUNS/ev-NAME-m120-v1).
#   learn9_arm.sh after RUNS NAME                           # after a MINUTES=120 run (started
#       beside it, it waits for the pick): the 40- and 120-minute models rated at once, one
#       game at a time each, then the curve; what each results folder's after.sh repeated
#   learn9_arm.sh curve RUNS NAME                           # the curve: the model made last
#       before every 10th minute of the run (MINUTES, 120 unless set) alone against GNU Go
#       level 10, GAMES (10 unless set) games a point, into RUNS/ev-NAME-curve-v1
# Each step appends what it ran, the commit and the times to RUNS/drive.log. Run it from the
# repository root with the checkout's .venv built (make install).
set -u
what=$1 R=$2 name=$3
shift 3
B=.venv/bin
log() { echo "$(date -u +%FT%TZ) $*" >> "$R/drive.log"; }
mkdir -p "$R"
case $what in
run)
  minutes=${MINUTES:-40}
  date +%s > "$R/start-$name"
  log "start $name at $(git rev-parse --short HEAD): kgrpc-cluster --profile learn9 $* --max-minutes $minutes --final-ladder-games 0"
  $B/kgrpc-cluster --profile learn9 "$@" --max-minutes "$minutes" --final-ladder-games 0 --view plain \
    --data-dir "$R/$name" > "$R/cluster-$name.log" 2>&1
  log "end $name rc=$?"
  picks=$minutes  # whole minutes; a run longer than 40 also gets its 40-minute model
  [ "$minutes" -gt 40 ] && picks="40 $minutes"
  for m in $picks; do
    $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py "$R/$name" "$(cat "$R/start-$name")" \
      "$R/m$m-$name" "$m" >> "$R/drive.log" 2>&1
  done
  ;;
rate)
  parallel=${2:-2}
  [ "${1:-}" = --parallel ] || parallel=2
  at=${AT:-40}
  log "rate $name m$at v1 at $(git rev-parse --short HEAD), --parallel $parallel"
  $B/kgrpc-eval ladder --models "$R/m$at-$name" --no-random --no-first --gnugo-levels 10 --games 100 \
    --visits 1 --parallel "$parallel" --out "$R/ev-$name-m$at-v1" > "$R/ev-$name-m$at-v1.log" 2>&1
  log "rated $name m$at rc=$?"
  ;;
curve)
  minutes=${MINUTES:-120} games=${GAMES:-10}
  log "curve $name v1 at $(git rev-parse --short HEAD), $games games a point"
  $B/python docs/results/learn9-gumbel-xeon-40m/pick_models.py "$R/$name" "$(cat "$R/start-$name")" \
    "$R/mcurve-$name" $(seq 10 10 "$minutes") >> "$R/drive.log" 2>&1
  $B/kgrpc-eval ladder --models "$R/mcurve-$name" --no-random --no-first --gnugo-levels 10 \
    --games "$games" --visits 1 --parallel 2 --out "$R/ev-$name-curve-v1" > "$R/ev-$name-curve-v1.log" 2>&1
  log "curve $name rc=$?"
  ;;
after)
  minutes=${MINUTES:-120}
  until grep -q "^$minutes min:" "$R/drive.log"; do sleep 15; done
  AT=$minutes "$0" rate "$R" "$name" --parallel 1 &
  AT=40 "$0" rate "$R" "$name" --parallel 1 &
  wait
  MINUTES=$minutes "$0" curve "$R" "$name"
  log "all done"
  ;;
*)
  echo "usage: learn9_arm.sh run|rate|after|curve RUNS NAME [args...]" >&2
  exit 2
  ;;
esac
