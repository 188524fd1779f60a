#!/usr/bin/env bash
# CPU time and run-queue wait of the live threads of each worker and the trainer, summed from
# /proc/PID/task/TID/schedstat (nanoseconds running, nanoseconds runnable but waiting, slices).
for p in $(pgrep -f "kgrpc.worker|trainer run"); do
  r=0 w=0
  for t in /proc/$p/task/*; do read a b n < $t/schedstat; r=$((r + a)); w=$((w + b)); done
  args=$(tr '\0' ' ' < /proc/$p/cmdline | grep -o "username demo-[0-9]*\|trainer run")
  echo "pid $p nice $(ps -o ni= -p $p | tr -d ' ') ($args), up $(ps -o etimes= -p $p | tr -d ' ') s: live threads ran $((r / 1000000000)) s, waited runnable $((w / 1000000000)) s; process CPU $(ps -o times= -p $p | tr -d ' ') s"
done
