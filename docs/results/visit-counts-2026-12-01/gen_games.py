"""GNU Go 19x19 games for a supervised net (an experiment of issue 12, not part of kgrpc).

Each game opens with 0-5 random moves on the 3rd-5th lines (so games differ), then GNU Go
plays both colours until two passes, a resignation or 400 moves. Writes one JSON line per game:
{"moves": [GTP vertices], "random": k, "dead": [GTP vertices], "end": "passes"|"cap"|"resign"}.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time

COLS = "ABCDEFGHJKLMNOPQRST"


class Gtp:
    def __init__(self, level: int, seed: int) -> None:
        self.p = subprocess.Popen(
            ["/usr/games/gnugo", "--mode", "gtp", "--level", str(level), "--seed", str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def cmd(self, line: str) -> str:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = []
        while True:
            s = self.p.stdout.readline()
            if s == "":
                raise RuntimeError(f"gnugo exited on {line!r}")
            if s == "\n" and out:
                break
            if s != "\n":
                out.append(s.rstrip("\n"))
        text = " ".join(out)
        if text.startswith("?"):
            raise RuntimeError(f"{line!r}: {text}")
        return text[1:].strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--games", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--level", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    g = Gtp(args.level, args.seed)
    g.cmd("boardsize 19")
    g.cmd("komi 7.5")
    t0 = time.time()
    with open(args.out, "a") as f:
        for i in range(args.games):
            g.cmd("clear_board")
            moves: list[str] = []
            k = rng.randint(0, 5)
            colour = "b"
            while len(moves) < k:
                v = f"{COLS[rng.randint(2, 16)]}{rng.randint(3, 17)}"
                if v in moves:
                    continue
                g.cmd(f"play {colour} {v}")
                moves.append(v)
                colour = "w" if colour == "b" else "b"
            end = "cap"
            while len(moves) < 400:
                v = g.cmd(f"genmove {colour}").upper()
                if v == "RESIGN":
                    end = "resign"
                    break
                moves.append("pass" if v == "PASS" else v)
                colour = "w" if colour == "b" else "b"
                if len(moves) >= 2 and moves[-1] == moves[-2] == "pass":
                    end = "passes"
                    break
            dead = g.cmd("final_status_list dead").split() if end == "passes" else []
            f.write(json.dumps({"moves": moves, "random": k, "dead": dead, "end": end}) + "\n")
            f.flush()
            print(f"game {i + 1}: {len(moves)} moves, {end}, {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
