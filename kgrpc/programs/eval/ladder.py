"""The rating ladder: every model of a directory against fixed reference engines.

Models are the ``NAME.onnx`` files of a directory (a coordinator's ``DATA_DIR/models``), in
training order: steps and rows come from the name (``{series}-b{B}c{C}-s{steps}-d{rows}``,
:mod:`trainer.naming`). Each plays ``kgrpc-gtp --model FILE --visits V``. References:

- ``random``: ``kgrpc-gtp --model none`` (uniform legal moves that never fill an own eye);
- ``first``: the first model of the directory at the same visits (not played by itself);
- ``gnugo-lL``: GNU Go at level L with Chinese rules, when installed (``--gnugo-levels``);
- any ``--opponent NAME=CMD``.

A match already in the output directory with the same settings is read back, not replayed,
so running the ladder again during a run only plays the new models.

Wall-clock time and self-play games of a model come from the coordinator's index when the
directory is ``DATA_DIR/models`` with ``DATA_DIR/coordinator.sqlite3`` beside it (the model's
``created_ms``, and the games accepted until then); otherwise the wall-clock time is the
file's modification time and the game count is unknown. Times are counted from the first
model's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from kgrpc.durable import atomic_write_bytes
from kgrpc.programs.eval.engine import gtp_command, split_command
from kgrpc.programs.eval.match import EngineSpec, GameResult, MatchResult, MatchSettings, run_match
from kgrpc.programs.eval.rating import Rating
from kgrpc.programs.eval.referee import Referee, find_gnugo, make_referee

RANDOM = "random"
FIRST = "first"


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    steps: int | None
    rows: int | None
    created: float  # unix seconds
    selfplay_games: int | None


@dataclass(frozen=True)
class LadderRecord:
    """One model against one reference: the row of ladder.csv (and of a later rating RPC)."""

    model: str
    opponent: str
    games: int
    wins: int
    losses: int
    draws: int
    win_rate: float
    win_low: float
    win_high: float
    elo: float
    elo_low: float  # -inf when the interval has no lower end
    elo_high: float  # +inf when it has no upper end
    training_steps: int | None
    training_rows: int | None
    selfplay_games: int | None
    wall_seconds: float | None
    visits: int

    @classmethod
    def make(cls, model: Model, opponent: str, rating: Rating, wall_seconds: float | None,
             visits: int) -> LadderRecord:
        return cls(model.name, opponent, rating.games, rating.wins, rating.losses, rating.draws,
                   rating.rate, rating.rate_low, rating.rate_high, rating.elo, rating.elo_low,
                   rating.elo_high, model.steps, model.rows, model.selfplay_games,
                   wall_seconds, visits)

    @staticmethod
    def columns() -> list[str]:
        return [f.name for f in fields(LadderRecord)]

    def to_row(self) -> dict[str, str]:
        out = {}
        for key, value in asdict(self).items():
            if value is None:
                out[key] = ""
            elif isinstance(value, float):
                out[key] = f"{value:.6g}"
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_row(cls, row: dict[str, str]) -> LadderRecord:
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for key, kind in kinds.items():
            text = row[key]
            if "None" in str(kind) and text == "":
                values[key] = None
            elif str(kind).startswith("int"):
                values[key] = int(text)
            elif str(kind).startswith("float"):
                values[key] = float(text)
            else:
                values[key] = text
        return cls(**values)  # type: ignore[arg-type]


def _run_facts(models_dir: Path) -> dict[str, tuple[float, int]]:
    """{model name: (created unix seconds, self-play games accepted by then)} from the
    coordinator's index beside the models directory; {} when there is none."""
    from kgrpc.coordinator.db import DB_NAME

    db = models_dir.parent / DB_NAME
    if not db.is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return {}
    try:
        facts = {}
        for name, created_ms in con.execute("SELECT name, created_ms FROM models"):
            (games,) = con.execute("SELECT COUNT(*) FROM games WHERE accepted_ms <= ?",
                                   (created_ms,)).fetchone()
            facts[name] = (created_ms / 1000.0, int(games))
        return facts
    except sqlite3.Error as exc:
        print(f"kgrpc-eval: cannot read {db} ({exc}); using file times", file=sys.stderr)
        return {}
    finally:
        con.close()


def discover_models(models_dir: Path) -> list[Model]:
    """The models of a directory in training order (steps, rows, then name)."""
    from trainer.naming import parse_name

    if not models_dir.is_dir():
        raise ValueError(f"models directory {models_dir} does not exist")
    facts = _run_facts(models_dir)
    models = []
    for path in sorted(models_dir.glob("*.onnx")):
        name = path.stem
        try:
            parsed = parse_name(name)
            steps, rows = parsed.steps, parsed.rows
        except ValueError:
            steps = rows = None
        created, games = facts.get(name, (path.stat().st_mtime, None))
        models.append(Model(name, path, steps, rows, created, games))
    if not models:
        raise ValueError(f"no .onnx models in {models_dir}")
    models.sort(key=lambda m: (m.steps if m.steps is not None else -1,
                               m.rows if m.rows is not None else -1, m.created, m.name))
    return models


def model_engine(model: Model, visits: int, settings: MatchSettings) -> EngineSpec:
    return EngineSpec(model.name, gtp_command("--model", str(model.path), "--visits", str(visits),
                                              "--size", str(settings.size),
                                              "--komi", f"{settings.komi:g}"))


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
        refs.append(EngineSpec(f"gnugo-l{level}", [gnugo, "--mode", "gtp", "--level", level,
                                                   "--chinese-rules"]))
    for item in args.opponent:
        name, sep, cmd = item.partition("=")
        if not sep or not name.strip() or not cmd.strip():
            raise ValueError(f"--opponent {item!r}: expected NAME=CMD")
        refs.append(EngineSpec(name.strip(), split_command(cmd)))
    names = [r.name for r in refs] + ([] if args.no_first else [FIRST])
    if len(set(names)) != len(names):
        raise ValueError(f"reference names must differ: {', '.join(names)}")
    return refs


def _settings_key(settings: MatchSettings, visits: int) -> dict:
    return {"games": settings.games, "size": settings.size, "komi": settings.komi,
            "rules": str(settings.rules), "max_moves": settings.move_cap, "visits": visits}


def _stored(match_dir: Path, key: dict) -> Rating | None:
    """The result of a finished match with the same settings in ``match_dir``, if any."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads((match_dir / "summary.json").read_text())
        if data.get("ladder_key") == key:
            s = data["summary"]
            return Rating.from_results(int(s["wins"]), int(s["losses"]), int(s["draws"]))
    return None


async def rate_model(model: Model, opponent: EngineSpec, visits: int, settings: MatchSettings,
                     referee: Referee, out_dir: Path) -> Rating:
    match_dir = out_dir / "matches" / f"{model.name}__vs__{opponent.name}"
    key = _settings_key(settings, visits)
    stored = _stored(match_dir, key)
    if stored is not None:
        print(f"kgrpc-eval: {model.name} vs {opponent.name}: {stored.describe()} (stored)",
              file=sys.stderr)
        return stored
    me = model_engine(model, visits, settings)

    def progress(game: GameResult, match: MatchResult) -> None:
        print(f"  [{len(match.games)}/{settings.games}] {game.black} vs {game.white}: "
              f"{game.result}  |  {match.rating().describe()}", file=sys.stderr, flush=True)

    print(f"kgrpc-eval: {model.name} vs {opponent.name}", file=sys.stderr)
    match = await run_match(me, opponent, settings, referee, match_dir, on_game=progress)
    # Mark the match as complete for these settings (read back by _stored).
    summary = json.loads((match_dir / "summary.json").read_text())
    summary["ladder_key"] = key
    atomic_write_bytes(match_dir / "summary.json", (json.dumps(summary, indent=1) + "\n").encode())
    return match.rating()


async def run_ladder(models: list[Model], references: list[EngineSpec], visits: int,
                     settings: MatchSettings, referee: Referee, out_dir: Path,
                     with_first: bool = True) -> list[LadderRecord]:
    t0 = min(m.created for m in models)
    records = []
    for i, model in enumerate(models):
        opponents = list(references)
        if with_first and i > 0:
            first = model_engine(models[0], visits, settings)
            opponents.append(EngineSpec(FIRST, first.command))
        for opp in opponents:
            rating = await rate_model(model, opp, visits, settings, referee, out_dir)
            records.append(LadderRecord.make(model, opp.name, rating, model.created - t0, visits))
    return records


async def cmd_ladder(args: argparse.Namespace) -> int:
    from kgrpc.programs.eval.cli import settings_from
    from kgrpc.programs.eval.report import write_reports

    if args.visits < 1:
        raise ValueError(f"--visits must be >= 1, got {args.visits}")
    settings = settings_from(args)
    out_dir = args.out or Path("ladder-out")
    models = discover_models(args.models)
    refs = reference_engines(args, settings)
    if not refs and (args.no_first or len(models) < 2):
        raise ValueError("no reference to play against")
    referee = make_referee(args.referee)
    print(f"kgrpc-eval: ladder of {len(models)} models against "
          f"{', '.join([r.name for r in refs] + ([] if args.no_first else [FIRST]))}; "
          f"referee {referee.name}", file=sys.stderr)
    try:
        records = await run_ladder(models, refs, args.visits, settings, referee, out_dir,
                                   with_first=not args.no_first)
    finally:
        await referee.close()
    paths = write_reports(records, settings, out_dir)
    for path in paths:
        print(path)
    return 0
