"""A following ladder on a budget (``kgrpc-eval ladder --follow --every-minutes M``): of the
releases a run makes, only the first and the newest one made at least M minutes after the
last one rated are rated; the others are skipped and said so.

Which releases count as "M minutes later" is decided by the coordinator's creation times of
the models, so the test sets the coordinator's clock (``kgrpc.coordinator.models.now_ms``)
before each publish instead of waiting: nothing here depends on how fast anything runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgrpc.programs.eval.ladder_follow import Budget
from kgrpc.programs.eval.ladder_models import Model

pytest.importorskip("onnxruntime")


def release(name: str, minute: float) -> Model:
    return Model(name, Path(f"{name}.onnx"), None, None, 1_000_000.0 + 60 * minute, None)


def test_budget_rates_the_first_release_and_the_newest_after_the_interval() -> None:
    budget = Budget(every_s=600)  # --every-minutes 10
    made: list[Model] = []

    def publish(name: str, minute: float) -> tuple[str | None, str]:
        made.append(release(name, minute))
        chosen, note = budget.choose(list(made))
        return (chosen.name if chosen else None), note

    assert publish("a", 0) == ("a", "rating a, the first release this ladder sees "
                               "(--every-minutes 10)")  # fmt: skip
    assert publish("b", 3)[0] is None
    chosen, note = publish("c", 9.9)
    assert chosen is None
    assert note == "skipping c: made 9.9 min after a, the last release rated (--every-minutes 10)"
    chosen, note = publish("d", 10.5)
    assert chosen == "d" and note.startswith("rating d: made 10.5 min after a")
    assert "2 releases between skipped" in note
    # The same newest announced again (a file added to it): decided once, nothing said.
    assert budget.choose(list(made)) == (None, "")
    # Two releases before the next pass: the newest is judged, the one before it skipped.
    made.append(release("e", 12))
    chosen, note = publish("f", 20.6)
    assert chosen == "f" and note.startswith("rating f: made 10.1 min after d")
    assert "1 release between skipped" in note
    assert budget.rated == ["a", "d", "f"]


def test_a_restarted_budget_takes_up_from_the_releases_rated_before() -> None:
    made = [release("a", 0), release("b", 4), release("c", 12), release("d", 15)]
    budget = Budget(every_s=600, rated=["a", "c"])  # what OUT/matches holds
    assert budget.choose(made[:3]) == (made[2], "")  # the newest was rated: read back
    chosen, note = budget.choose(made)
    assert chosen is None and "3.0 min after c" in note


# ------------------------------------------------------------------ a real follower
NAMES = [f"kg-b1c8-s{100 * i}-d{1000 * i}" for i in range(7)]
# Minutes of the run at which each of NAMES is released; with --every-minutes 60 the ladder
# rates 0 (the first), 3 (61 min after 0) and 5 (69 min after 3), and skips the others.
MINUTES = [0, 1, 2, 61, 62, 130, 135]
EVERY = "60"
LADDER_ARGS = [
    *("--games", "2", "--size", "5", "--komi", "0.5", "--visits", "4", "--parallel", "2"),
    *("--gnugo-levels", "", "--referee", "playouts", "--no-first", "--nice", "5"),
]


async def start_follower(address: str, token: str, out: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "kgrpc.programs.eval", "ladder", "--coordinator", address, "--token", token),
        *LADDER_ARGS,
        *("--follow", "--every-minutes", EVERY, "--out", str(out)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


class Follower:
    """A kgrpc-eval ladder process and the lines of its log."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.lines.append(line.decode())

    async def until(self, what: str, cond) -> None:  # type: ignore[no-untyped-def]
        for _ in range(3000):
            assert self.proc.returncode is None, "".join(self.lines)
            if await cond():
                return
            await asyncio.sleep(0.1)
        pytest.fail(f"timed out waiting for {what}:\n{''.join(self.lines)}")

    async def said(self, text: str) -> None:
        async def cond() -> bool:
            return any(text in line for line in self.lines)

        await self.until(repr(text), cond)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 60)
        await self.reader
        assert self.proc.returncode == 0, "".join(self.lines)


@pytest.mark.slow  # real GTP matches through subprocess engines, two ladder processes
async def test_follow_on_a_budget_rates_the_first_release_and_those_after_the_interval(
    tmp_path: Path, coordinator_factory, monkeypatch
):  # type: ignore[no-untyped-def]
    from kgrpc.coordinator import models as coordinator_models
    from kgrpc.programs.eval.report import read_ladder_csv
    from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
    from trainer.export import init_model
    from trainer.publish import publish_model

    clock = [1_800_000_000_000]
    monkeypatch.setattr(coordinator_models, "now_ms", lambda: clock[0])
    coord = await coordinator_factory(gating_enabled=False, http_listen="127.0.0.1:0")
    files = tmp_path / "made"
    for seed, name in enumerate(NAMES):
        init_model((5, 9), 1, 8, files / f"{name}.onnx", name=name, seed=seed)

    async def publish(i: int) -> None:
        clock[0] = 1_800_000_000_000 + MINUTES[i] * 60_000
        await publish_model(coord.address, coord.trainer_token, files / f"{NAMES[i]}.onnx")

    async def rated() -> list[str]:
        async with coord.channel("worker") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            resp = await stub.ListRatings(coordinator_pb2.ListRatingsRequest())
        return [r.model for r in resp.ratings]

    def rated_are(*indexes: int):  # type: ignore[no-untyped-def]
        async def cond() -> bool:
            return await rated() == [NAMES[i] for i in indexes]

        return cond

    out = tmp_path / "ladder"
    await publish(0)
    ladder = Follower(await start_follower(coord.address, coord.trainer_token, out))
    try:
        await ladder.until("the first release's rating", rated_are(0))
        # --nice 5: the ladder (and the engines it starts) below this process's priority.
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, ladder.proc.pid) == min(19, mine + 5)
        await publish(1)
        await ladder.said(f"skipping {NAMES[1]}: made 1.0 min after {NAMES[0]}")
        await publish(2)
        await ladder.said(f"skipping {NAMES[2]}: made 2.0 min after {NAMES[0]}")
        await publish(3)
        await ladder.until("the rating 61 minutes on", rated_are(0, 3))
        await ladder.said(f"rating {NAMES[3]}: made 61.0 min after {NAMES[0]}")
        assert any("2 releases between skipped" in line for line in ladder.lines)
        # Two releases at once: whichever passes the ladder makes, the one a minute after the
        # last rating is skipped and the one 69 minutes after it rated.
        await publish(4)
        await publish(5)
        await ladder.until("the rating 69 minutes on", rated_are(0, 3, 5))
        await ladder.said(f"ladder of {NAMES[5]} done")
        await ladder.stop()
        assert "kgrpc-eval: stopped\n" in ladder.lines
        records = read_ladder_csv(out / "ladder.csv")
        assert [(r.model, r.opponent) for r in records] == [
            (NAMES[0], "random"),
            (NAMES[3], "random"),
            (NAMES[5], "random"),
        ]
        # Skipped releases are not even downloaded.
        assert sorted(p.stem for p in (out / "models").glob("*.onnx")) == [
            NAMES[0],
            NAMES[3],
            NAMES[5],
        ]

        # Restarted, the ladder knows what it rated (OUT/matches): 5 minutes after the last
        # rating is too soon, and nothing is played again.
        ladder = Follower(await start_follower(coord.address, coord.trainer_token, out))
        await ladder.said(f"ladder of {NAMES[5]} done")
        assert sum("(stored)" in line for line in ladder.lines) == 3
        await publish(6)
        await ladder.said(f"skipping {NAMES[6]}: made 5.0 min after {NAMES[5]}")
        await ladder.stop()
        assert await rated() == [NAMES[0], NAMES[3], NAMES[5]]
        # The dashboard's Elo graph draws the ladder's series at the releases' times.
        from tests.dashboard_helpers import get_json, http_url

        elo = await get_json(http_url(coord) + "/api/elo")
        series = {s["key"]: s for s in elo["series"]}  # type: ignore[index]
        points = series["ladder-random"]["points"]
        assert [(p["model"], p["t_ms"]) for p in points] == [
            (NAMES[i], 1_800_000_000_000 + MINUTES[i] * 60_000) for i in (0, 3, 5)
        ]
    finally:
        if ladder.proc.returncode is None:
            ladder.proc.kill()
            await ladder.proc.wait()
        ladder.reader.cancel()


def test_every_minutes_needs_follow_and_nice_a_range(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "kgrpc.programs.eval", "ladder", "--models", str(tmp_path)]
    for extra, message in (
        (["--every-minutes", "5"], "--every-minutes must be >= 0 and needs --follow"),
        (["--nice", "40"], "--nice must be between 0 and 19"),
    ):
        proc = subprocess.run(
            [*base, "--games", "2", *extra], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
