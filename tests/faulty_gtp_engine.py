"""A deliberately broken GTP engine (a stand-in for a buggy third-party program).

``python faulty_gtp_engine.py MODE``: answers the setup commands and ``play`` normally, and
misbehaves on ``genmove`` according to MODE: ``crash`` (exits with code 3 and a message on
stderr), ``error`` (answers ``? out of ideas``), ``hang`` (never answers), ``illegal`` (plays
on the point the opponent just took), ``garbage`` (answers ``= banana``).
"""

import sys
import time

mode = sys.argv[1]
last_opponent = "A1"
for raw in sys.stdin:
    words = raw.split()
    if not words:
        continue
    command = words[0]
    if command == "quit":
        print("=\n", flush=True)
        break
    if command == "play" and len(words) > 2:
        last_opponent = words[2]
    if command != "genmove":
        print("= faulty\n" if command == "name" else "=\n", flush=True)
        continue
    if mode == "crash":
        print("faulty engine: segmentation fault (simulated)", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "error":
        print("? out of ideas\n", flush=True)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "illegal":
        print(f"= {last_opponent}\n", flush=True)
    else:
        print("= banana\n", flush=True)
