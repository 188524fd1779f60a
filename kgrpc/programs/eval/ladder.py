"""The rating ladder: every model of a run against fixed reference engines.

Models come from a directory (``--models DIR``: its ``NAME.onnx`` files, steps and rows parsed
from the name ``{series}-b{B}c{C}-s{steps}-d{rows}``, :mod:`trainer.naming`) or from a running
coordinator (``--coordinator ADDR``: its released models, downloaded as workers do, with the
steps, rows and times the coordinator holds; :mod:`kgrpc.programs.eval.remote`). In training order,
each plays ``kgrpc-gtp --model FILE --visits V`` (and ``--score-utility-factor F`` when the
ladder is given one, to rate models with the search they play self-play with). References:

- ``random``: ``kgrpc-gtp --model none`` (uniform legal moves that never fill an own eye);
- ``first``: the run's first model at the same visits (not played by itself);
- ``gnugo-lL``: GNU Go at level L with Chinese rules, when installed (``--gnugo-levels``);
- any ``--opponent NAME=CMD``.

A match already in the output directory with the same settings is read back, not replayed,
so running the ladder again during a run only plays the new models. ``--follow`` keeps
running, a pass at each release, every release or on a budget (``--every-minutes``):
:mod:`kgrpc.programs.eval.ladder_follow`.

A model's wall-clock time and self-play game count come from its file and an optional sidecar
``NAME.json`` (:mod:`kgrpc.programs.eval.ladder_models`); each result becomes a
:class:`~kgrpc.programs.eval.ladder_record.LadderRecord`. From a coordinator, every result is
reported to it (ReportRating) and the row written is the coordinator's answer: self-play games
and wall-clock time (from the run's first model) as the coordinator counts them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kgrpc.durable import atomic_write_bytes
from kgrpc.programs.eval.engine import gtp_command, split_command
from kgrpc.programs.eval.ladder_models import Model, discover_models, wall_origin
from kgrpc.programs.eval.ladder_record import LadderRecord, Recorder
from kgrpc.programs.eval.match import EngineSpec, GameResult, MatchResult, MatchSettings, run_match
from kgrpc.programs.eval.referee import Referee, find_gnugo, make_referee
from kgrpc.rating import Rating

RANDOM = "random"
FIRST = "first"


@dataclass(frozen=True)
class ModelSearch:
    """How the models search in the ladder's games (kgrpc-gtp flags)."""

    visits: int
    score_utility_factor: float = 0.0  # 0: win/loss utility only
    gumbel: bool = False  # Gumbel root search (kgrpc-gtp --gumbel) instead of PUCT
    gumbel_considered: int = 16

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ModelSearch:
        return cls(args.visits, args.score_utility_factor, args.gumbel, args.gumbel_considered)

    def gtp_args(self) -> list[str]:
        extra = ["--visits", str(self.visits)]
        if self.score_utility_factor:
            extra += ["--score-utility-factor", f"{self.score_utility_factor:g}"]
        if self.gumbel:
            extra += ["--gumbel", "--gumbel-considered", str(self.gumbel_considered)]
        return extra


def model_engine(model: Model, search: ModelSearch, settings: MatchSettings) -> EngineSpec:
    return EngineSpec(
        model.name,
        gtp_command(
            "--model",
            str(model.path),
            *search.gtp_args(),
            "--size",
            str(settings.size),
            "--komi",
            f"{settings.komi:g}",
        ),
    )


def reference_engines(args: argparse.Namespace, settings: MatchSettings) -> list[EngineSpec]:
    """random, the GNU Go levels and the --opponent engines (``first`` is added per model)."""
    refs = []
    if not args.no_random:
        random_play = gtp_command("--model", "none", "--size", str(settings.size))
        refs.append(EngineSpec(RANDOM, random_play))
    gnugo = find_gnugo()
    levels = args.gnugo_levels if args.gnugo_levels is not None else ("1" if gnugo else "")
    for level in (x.strip() for x in levels.split(",") if x.strip()):
        if gnugo is None:
            raise ValueError("--gnugo-levels: GNU Go is not installed (apt-get install gnugo)")
        if not level.isdigit():
            raise ValueError(f"--gnugo-levels: {level!r} is not a level number")
        refs.append(
            EngineSpec(
                f"gnugo-l{level}", [gnugo, "--mode", "gtp", "--level", level, "--chinese-rules"]
            )
        )
    for item in args.opponent:
        name, sep, cmd = item.partition("=")
        if not sep or not name.strip() or not cmd.strip():
            raise ValueError(f"--opponent {item!r}: expected NAME=CMD")
        refs.append(EngineSpec(name.strip(), split_command(cmd)))
    names = [r.name for r in refs] + ([] if args.no_first else [FIRST])
    if len(set(names)) != len(names):
        raise ValueError(f"reference names must differ: {', '.join(names)}")
    return refs


def _settings_key(settings: MatchSettings, search: ModelSearch) -> dict:
    key = {
        "games": settings.games,
        "size": settings.size,
        "komi": settings.komi,
        "rules": str(settings.rules),
        "max_moves": settings.move_cap,
        "visits": search.visits,
    }
    if search.score_utility_factor:  # absent when 0: matches stored before it still count
        key["score_utility_factor"] = search.score_utility_factor
    if search.gumbel:  # absent when off, as above
        key["gumbel_considered"] = search.gumbel_considered
    return key


def _stored(match_dir: Path, key: dict) -> tuple[Rating, int | None] | None:
    """The result of a finished match with the same settings in ``match_dir`` and its
    distinct games (None: stored before they were counted), if any."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads((match_dir / "summary.json").read_text())
        if data.get("ladder_key") == key:
            s = data["summary"]
            distinct = s.get("distinct_games")
            rating = Rating.from_results(int(s["wins"]), int(s["losses"]), int(s["draws"]))
            return rating, None if distinct is None else int(distinct)
    return None


def has_stored(
    model: str, opponent: str, search: ModelSearch, settings: MatchSettings, out_dir: Path
) -> bool:
    """Whether ``out_dir`` holds the finished pairing of ``model`` and ``opponent``."""
    match_dir = out_dir / "matches" / f"{model}__vs__{opponent}"
    return _stored(match_dir, _settings_key(settings, search)) is not None


async def rate_model(
    model: Model,
    opponent: EngineSpec,
    search: ModelSearch,
    settings: MatchSettings,
    referee: Referee,
    out_dir: Path,
) -> tuple[Rating, int | None]:
    """The model's result against ``opponent`` and how many games were distinct (None for a
    match stored before they were counted); a stored match is read back, not replayed."""
    match_dir = out_dir / "matches" / f"{model.name}__vs__{opponent.name}"
    key = _settings_key(settings, search)
    stored = _stored(match_dir, key)
    if stored is not None:
        print(
            f"kgrpc-eval: {model.name} vs {opponent.name}: {stored[0].describe()} (stored)",
            file=sys.stderr,
        )
        return stored
    me = model_engine(model, search, settings)

    def progress(game: GameResult, match: MatchResult) -> None:
        print(
            f"  [{len(match.games)}/{settings.games}] {game.black} vs {game.white}: "
            f"{game.result}  |  {match.rating().describe()}",
            file=sys.stderr,
            flush=True,
        )

    print(f"kgrpc-eval: {model.name} vs {opponent.name}", file=sys.stderr)
    match = await run_match(me, opponent, settings, referee, match_dir, on_game=progress)
    # Mark the match as complete for these settings (read back by _stored).
    summary = json.loads((match_dir / "summary.json").read_text())
    summary["ladder_key"] = key
    atomic_write_bytes(match_dir / "summary.json", (json.dumps(summary, indent=1) + "\n").encode())
    return match.rating(), match.distinct_games()


async def run_ladder(
    models: list[Model],
    references: list[EngineSpec],
    search: ModelSearch,
    settings: MatchSettings,
    referee: Referee,
    out_dir: Path,
    with_first: bool = True,
    record: Recorder | None = None,
    first: Model | None = None,
) -> list[LadderRecord]:
    """Every model against every reference (and the first model: ``first``, by default
    ``models[0]``), in order; ``record`` makes each row (default: from the models' own facts,
    times from the first model's)."""
    t0 = wall_origin(models)
    first = first or models[0]

    async def local(
        model: Model, opponent: str, rating: Rating, distinct: int | None
    ) -> LadderRecord:
        return LadderRecord.make(
            model, opponent, rating, model.created - t0, search.visits, distinct
        )

    record = record or local
    records = []
    for model in models:
        opponents = list(references)
        if with_first and model.name != first.name:
            opponents.append(EngineSpec(FIRST, model_engine(first, search, settings).command))
        for opp in opponents:
            rating, distinct = await rate_model(model, opp, search, settings, referee, out_dir)
            records.append(await record(model, opp.name, rating, distinct))
    return records


async def ladder_pass(
    models: list[Model],
    refs: list[EngineSpec],
    args: argparse.Namespace,
    settings: MatchSettings,
    referee: Referee,
    out_dir: Path,
    record: Recorder | None = None,
    first: Model | None = None,
) -> list[Path]:
    """Rate ``models`` (stored pairings are read back; the ``first`` reference is ``first``,
    by default ``models[0]``), write the reports; their paths."""
    from kgrpc.programs.eval.report import write_reports

    first = first or models[0]
    if not refs and (args.no_first or all(m.name == first.name for m in models)):
        raise ValueError("no reference to play against")
    names = [r.name for r in refs] + ([] if args.no_first else [FIRST])
    print(
        f"kgrpc-eval: ladder of {len(models)} models against {', '.join(names)}; "
        f"referee {referee.name}",
        file=sys.stderr,
    )
    search = ModelSearch.from_args(args)
    records = await run_ladder(
        models,
        refs,
        search,
        settings,
        referee,
        out_dir,
        with_first=not args.no_first,
        record=record,
        first=first,
    )
    return write_reports(records, settings, out_dir, search.score_utility_factor)


async def _from_coordinator(
    args: argparse.Namespace,
    refs: list[EngineSpec],
    settings: MatchSettings,
    referee: Referee,
    out_dir: Path,
) -> int:
    from kgrpc.programs.eval.remote import RemoteRun

    async with RemoteRun(args.coordinator, args.token, args.tls_ca, out_dir / "models") as run:
        await run.check_may_report()
        if not args.follow:
            models = await run.released_models()
            if not models:
                raise ValueError(f"the coordinator at {args.coordinator} has released no model")
            record = run.recorder(args.visits, settings)
            for path in await ladder_pass(models, refs, args, settings, referee, out_dir, record):
                print(path)
            return 0

        from kgrpc.programs.eval.ladder_follow import follow_run

        return await follow_run(run, args, refs, settings, referee, out_dir)


async def cmd_ladder(args: argparse.Namespace) -> int:
    from kgrpc.programs.eval.cli import settings_from

    if args.visits < 1:
        raise ValueError(f"--visits must be >= 1, got {args.visits}")
    from kgrpc.mcts.config import SearchConfig

    try:  # the search's own rule, before any engine starts
        SearchConfig(
            visits=args.visits,
            score_utility_factor=args.score_utility_factor,
            gumbel=args.gumbel,
            gumbel_considered=args.gumbel_considered,
        )
    except ValueError as exc:
        raise ValueError(f"--score-utility-factor / --gumbel-considered: {exc}") from None
    if args.follow and not args.coordinator:
        raise ValueError("--follow needs --coordinator")
    if args.every_minutes < 0 or (args.every_minutes > 0 and not args.follow):
        raise ValueError(
            f"--every-minutes must be >= 0 and needs --follow, got {args.every_minutes:g}"
        )
    if not 0 <= args.nice <= 19:
        raise ValueError(f"--nice must be between 0 and 19, got {args.nice}")
    settings = settings_from(args)
    out_dir = args.out or Path("ladder-out")
    models = discover_models(args.models) if args.models else []
    refs = reference_engines(args, settings)
    if not refs and args.no_first:
        raise ValueError("no reference to play against")
    if args.coordinator:
        from kgrpc.programs.eval.remote import check_opponent_names

        check_opponent_names([r.name for r in refs] + ([] if args.no_first else [FIRST]))
    if args.nice:  # before any engine starts: they inherit it
        os.nice(args.nice)
    referee = make_referee(args.referee)
    try:
        if args.coordinator:
            return await _from_coordinator(args, refs, settings, referee, out_dir)
        for path in await ladder_pass(models, refs, args, settings, referee, out_dir):
            print(path)
        return 0
    finally:
        await referee.close()
