"""A ladder that follows a run (``kgrpc-eval ladder --coordinator ADDR --follow``): a pass now
and at each release (WatchModels, :meth:`kgrpc.programs.eval.remote.RemoteRun.follow`) until
SIGTERM or Ctrl-C.

- Every release (the default): each pass rates every released model; stored pairings are
  read back, so it plays only the new one.
- On a budget (``--every-minutes M``): a pass rates the newest release only when it was made
  at least M minutes after the last release rated; the first one the ladder sees is rated.
  Minutes are the coordinator's creation times of the models, so which releases are rated
  depends on when they were made, not on how fast the ladder plays; the releases in between
  are skipped, each skip said in the log (:class:`Budget`). Only the rated releases (and the
  run's first model, for the ``first`` reference) are downloaded; the reports cover them. A
  restarted ladder takes the releases with a stored pairing in OUT/matches as rated.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from kgrpc.programs.eval.ladder import FIRST, ModelSearch, has_stored, ladder_pass
from kgrpc.programs.eval.ladder_models import Model
from kgrpc.programs.eval.match import EngineSpec, MatchSettings
from kgrpc.programs.eval.referee import Referee
from kgrpc.programs.eval.remote import RemoteRun


def say(text: str) -> None:
    print(f"kgrpc-eval: {text}", file=sys.stderr, flush=True)


@dataclass
class Budget:
    """Which releases a budgeted ladder rates: the first it sees, then the newest release
    made at least ``every_s`` seconds after the last one rated."""

    every_s: float
    rated: list[str] = field(default_factory=list)  # release names, in the order rated
    seen: str = ""  # the newest release a pass has decided on (a release is announced again
    # when a file is added to it: decided once)

    def choose(self, releases: list[Model]) -> tuple[Model | None, str]:
        """(the release this pass rates or None, what to say in the log: '' for nothing);
        ``releases`` in training order."""
        if not releases or releases[-1].name == self.seen:
            return None, ""
        newest = releases[-1]
        self.seen = newest.name
        if newest.name in self.rated:  # rated before a restart: the pass reads it back
            return newest, ""
        by_name = {m.name: m for m in releases}
        last = next((by_name[n] for n in reversed(self.rated) if n in by_name), None)
        minutes = f"--every-minutes {self.every_s / 60:g}"
        if last is None:
            self.rated.append(newest.name)
            return newest, f"rating {newest.name}, the first release this ladder sees ({minutes})"
        after = (newest.created - last.created) / 60
        if after * 60 < self.every_s:
            return None, (
                f"skipping {newest.name}: made {after:.1f} min after {last.name}, the last "
                f"release rated ({minutes})"
            )
        skipped = [m for m in releases if last.created < m.created < newest.created]
        self.rated.append(newest.name)
        return newest, (
            f"rating {newest.name}: made {after:.1f} min after {last.name}, the last release "
            f"rated; {len(skipped)} release{'' if len(skipped) == 1 else 's'} between "
            f"skipped ({minutes})"
        )


def stored_releases(
    releases: list[Model],
    refs: list[EngineSpec],
    search: ModelSearch,
    settings: MatchSettings,
    out_dir: Path,
) -> list[str]:
    """The releases with a finished pairing stored in ``out_dir`` (rated before a restart)."""
    names = [r.name for r in refs] + [FIRST]
    return [
        m.name
        for m in releases
        if any(has_stored(m.name, n, search, settings, out_dir) for n in names)
    ]


async def follow_run(
    run: RemoteRun,
    args: argparse.Namespace,
    refs: list[EngineSpec],
    settings: MatchSettings,
    referee: Referee,
    out_dir: Path,
) -> int:
    """Follow the run until SIGTERM or SIGINT (then 0)."""
    record = run.recorder(args.visits, settings)

    async def every_release() -> None:
        models = await run.released_models()
        if not refs and len(models) < 2:
            say(f"{models[0].name} is the first model: waiting for the next release")
            return
        paths = await ladder_pass(models, refs, args, settings, referee, out_dir, record)
        say(f"ladder of {models[-1].name} done: {', '.join(map(str, paths))}")

    budget: Budget | None = None

    async def on_budget() -> None:
        nonlocal budget
        releases = await run.releases()
        if budget is None:  # the first pass: what an earlier run of the ladder rated
            search = ModelSearch.from_args(args)
            rated = stored_releases(releases, refs, search, settings, out_dir)
            budget = Budget(args.every_minutes * 60, rated)
        chosen, note = budget.choose(releases)
        if note:
            say(note)
        if chosen is None:
            return
        first = releases[0]
        rated = [m for m in releases if m.name in budget.rated]
        if not refs and all(m.name == first.name for m in rated):
            say(f"{first.name} is the first model: waiting for a later release")
            return
        await run.fetch(rated + ([] if args.no_first or first in rated else [first]))
        paths = await ladder_pass(
            rated, refs, args, settings, referee, out_dir, record, first=first
        )
        say(f"ladder of {chosen.name} done: {', '.join(map(str, paths))}")

    return await until_stopped(run.follow(on_budget if args.every_minutes > 0 else every_release))


async def until_stopped(work: Awaitable[None]) -> int:
    """Run ``work`` until SIGTERM or SIGINT cancel it: 0 then."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    stop: Callable[[], object] = task.cancel
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
        say("stopped")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0
