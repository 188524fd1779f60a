"""The validation pool's throughput when the event loop is busy, as a fleet keeps it.

``--clients`` callers each validate one random 9x9 game at a time (a fleet's one-game
uploads) through a ``ValidationPool`` of ``--workers`` processes, for ``--seconds``, while
one more task holds the event loop for ``--turn-ms`` at a time and yields (the rest of a
coordinator's calls). Each hand-off to a process costs a few loop turns whatever it carries,
so with one game per hand-off the games a second follow the loop's turns; with the games
waiting handed off together (issue 26) they follow the backlog. Prints games/s, the latency
of a validation (p50, p99) and, where the pool counts them, the hand-offs. Run against
another checkout with ``PYTHONPATH=CHECKOUT``:

    .venv/bin/python docs/results/issue26-engines-fleet/pool_handoffs.py --turn-ms 10
"""

from __future__ import annotations

import argparse
import asyncio
import time

from kgrpc.coordinator.validate import ValidationSettings
from kgrpc.coordinator.validation_pool import ValidationPool
from kgrpc.randgame import make_random_game


def hold(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--turn-ms", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    pool = ValidationPool(args.workers, ValidationSettings(require_task=False, sgf_share=1.0))
    await pool.warm_up()
    games = [make_random_game(9, "chinese", 7.0, s, model="m") for s in range(8)]
    data = [g.SerializeToString() for g in games]
    moves = [len(g.moves) for g in games]
    stop = time.perf_counter() + args.seconds
    latencies: list[float] = []

    async def client(i: int) -> None:
        n = i
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await pool.validate([(data[n % 8], "w")], [moves[n % 8]], "token", i)
            latencies.append(time.perf_counter() - t)
            n += 1

    async def busy_loop() -> None:
        while time.perf_counter() < stop:
            hold(args.turn_ms / 1000)
            await asyncio.sleep(0)

    start = time.perf_counter()
    busy = [busy_loop()] if args.turn_ms > 0 else []
    await asyncio.gather(*(client(i) for i in range(args.clients)), *busy)
    elapsed = time.perf_counter() - start
    pool.stop()
    latencies.sort()
    n = len(latencies)
    handoffs = getattr(pool, "handoffs", None)
    print(
        f"{args.clients} callers, {args.workers} processes, loop turns of {args.turn_ms:g} ms: "
        f"{n / elapsed:.0f} games/s, p50 {latencies[n // 2] * 1000:.1f} ms, "
        f"p99 {latencies[int(n * 0.99)] * 1000:.1f} ms, "
        + (f"{n / handoffs:.1f} games per hand-off" if handoffs else "one game per hand-off")
    )


if __name__ == "__main__":
    asyncio.run(main())
