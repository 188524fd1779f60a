#!/usr/bin/env bash
# After the 2-hour late-drop run (learn9_arm.sh run, MINUTES=120): the 40- and 120-minute
# models alone against GNU Go level 10 (100 games each, both at once, one game at a time
# each), then the 10-minute curve. It first ran with these steps written out, before they
# became `learn9_arm.sh after` (commit 691e023), which does the same and is called instead.
set -u
cd /work/main
MINUTES=120 exec docs/results/learn9_arm.sh after /work/runs/s20 drop
