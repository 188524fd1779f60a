"""``kgrpc-eval``: ``match`` two GTP engines, or rate a directory of models on a ``ladder``.

    kgrpc-eval match --a "kgrpc-gtp --model m.onnx --visits 100" \\
        --b "gnugo --mode gtp --level 1 --chinese-rules" --games 40 --size 9 --komi 7.5 \\
        --parallel 2 --out match-out
    kgrpc-eval ladder --models DATA_DIR/models --games 20 --size 9 --visits 100 \\
        --opponent gnugo-l3="gnugo --mode gtp --level 3 --chinese-rules" --out ladder-out
    kgrpc-eval ladder --coordinator HOST:PORT --token TRAINER_TOKEN --follow --games 20 ...

See docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from kgrpc.cli_help import ProgramParser, env_flag
from kgrpc.go.rules import Rules
from kgrpc.programs.eval.engine import EngineError, GtpProcess, split_command
from kgrpc.programs.eval.match import EngineSpec, GameResult, MatchResult, MatchSettings, run_match
from kgrpc.programs.eval.referee import REFEREES, make_referee


def _add_game_options(p: argparse.ArgumentParser, group: Any = None) -> None:
    """The flags of the games themselves (into argument group ``group`` when given)."""
    g = {"group": group}
    env_flag(p, "--games", type=int, required=True, help="games per match", **g)
    env_flag(p, "--size", type=int, default=9, help="board size", **g)
    env_flag(p, "--komi", type=float, default=7.5, help="komi", **g)
    env_flag(
        p,
        "--rules",
        **g,
        default="chinese",
        help="rules of our referee board (engines get theirs from their own command lines)",
    )
    env_flag(p, "--parallel", type=int, default=1, help="games at once", **g)
    env_flag(
        p,
        "--move-timeout",
        **g,
        type=float,
        default=120.0,
        help="seconds an engine may take for one answer",
    )
    env_flag(
        p,
        "--max-moves",
        **g,
        type=int,
        default=0,
        show="0: 3*size*size",
        help="move cap of a game, scored when reached",
    )
    env_flag(
        p,
        "--referee",
        **g,
        choices=REFEREES,
        default="auto",
        help="who judges dead stones: gnugo, playouts, or auto (GNU Go when installed)",
    )
    env_flag(p, "--out", type=Path, default=None, help="directory for SGF files and results", **g)


def build_parser() -> argparse.ArgumentParser:
    """Every flag also reads ``KGRPC_EVAL_<FLAG>`` (kgrpc.cli_help: flag > variable > default);
    the ladder's token and CA also the trainer's ``KGRPC_TRAINER_TOKEN`` and
    ``KGRPC_TRAINER_TLS_CA``."""
    parser = ProgramParser(
        prog="kgrpc-eval",
        description="matches and rating ladders of GTP engines",
        env_program="eval",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("match", help="play two GTP engines against each other")
    env_flag(m, "--a", required=True, metavar="CMD", help="engine A's command line")
    env_flag(m, "--b", required=True, metavar="CMD", help="engine B's command line")
    env_flag(m, "--a-name", default="", show="its GTP name", help="A's name in results")
    env_flag(m, "--b-name", default="", show="its GTP name", help="B's name in results")
    env_flag(m, "--json", action="store_true", help="print the summary as JSON")
    _add_game_options(m)
    lad = sub.add_parser("ladder", help="rate every model of a run against references")
    # Over 20 flags: --help shows them in groups.
    rated = lad.add_argument_group("models rated")
    refs = lad.add_argument_group("references and search")
    source = rated.add_mutually_exclusive_group(required=True)
    one_of = "give one of --models and --coordinator"
    env_flag(
        lad,
        "--models",
        type=Path,
        group=source,
        no_env=one_of,
        help="directory of NAME.onnx models (offline)",
    )
    env_flag(
        lad,
        "--coordinator",
        metavar="HOST:PORT",
        group=source,
        no_env=one_of,
        help="rate the coordinator's released models and report every result "
        "to it (needs a trainer token)",
    )
    env_flag(
        lad,
        "--token",
        group=rated,
        default=None,
        secret=True,
        fallback_env=("KGRPC_TRAINER_TOKEN",),
        help="trainer token for --coordinator (best given in the environment)",
    )
    env_flag(
        lad,
        "--tls-ca",
        group=rated,
        default=None,
        fallback_env=("KGRPC_TRAINER_TLS_CA",),
        show="none, plaintext",
        help="CA certificate (PEM) of a TLS coordinator",
    )
    env_flag(
        lad,
        "--follow",
        group=rated,
        action="store_true",
        help="with --coordinator: keep running, rating each new release",
    )
    env_flag(
        lad,
        "--every-minutes",
        group=rated,
        type=float,
        default=0.0,
        metavar="M",
        show="0: every release",
        help="with --follow: rate the newest release only when it was made at least M "
        "minutes after the last one rated (the first is rated; those between are skipped)",
    )
    env_flag(
        lad,
        "--nice",
        group=rated,
        type=int,
        default=0,
        help="lower the OS priority of the ladder and its engines by this much (0-19), so "
        "that a run's self-play keeps the cores",
    )
    env_flag(
        lad,
        "--opponent",
        group=refs,
        action="append",
        default=[],
        metavar="NAME=CMD",
        help="a further reference engine (repeatable; the variable: comma-separated)",
    )
    env_flag(
        lad, "--visits", type=int, default=100, help="visits per move of the models", group=refs
    )
    env_flag(
        lad,
        "--score-utility-factor",
        group=refs,
        type=float,
        default=0.0,
        help="the models' score weight in their search's utility (kgrpc-gtp's flag; self-play's "
        "setting rates them as they play themselves); 0 = win/loss only",
    )
    env_flag(
        lad,
        "--gumbel",
        group=refs,
        action="store_true",
        help="the models choose moves by a Gumbel root search of --visits simulations "
        "(kgrpc-gtp --gumbel)",
    )
    env_flag(
        lad,
        "--gumbel-considered",
        group=refs,
        type=int,
        default=16,
        help="with --gumbel: root moves sampled by Gumbel-top-k",
    )
    env_flag(
        lad,
        "--gnugo-levels",
        group=refs,
        default=None,
        metavar="L[,L]",
        show="1 when GNU Go is installed",
        help="GNU Go levels as references ('' for none)",
    )
    env_flag(lad, "--no-random", action="store_true", help="no random-play reference", group=refs)
    env_flag(lad, "--no-first", action="store_true", help="no first-model reference", group=refs)
    _add_game_options(lad, lad.add_argument_group("games"))
    return parser


def settings_from(args: argparse.Namespace) -> MatchSettings:
    return MatchSettings(
        games=args.games,
        size=args.size,
        komi=args.komi,
        rules=Rules.from_name(args.rules),
        parallel=args.parallel,
        move_timeout=args.move_timeout,
        max_moves=args.max_moves,
    )


async def preflight(command: list[str], size: int, timeout: float) -> str:
    """Start the engine once: its GTP name (EngineError if it cannot play this size)."""
    engine = GtpProcess(command)
    try:
        name = await engine.send("name", timeout)
        await engine.send(f"boardsize {size}", timeout)
        return name.strip() or engine.label
    finally:
        await engine.close()


def progress_line(result: GameResult, match: MatchResult) -> str:
    total = match.settings.games
    what = result.result + (f" ({result.reason})" if result.reason != "score" else "")
    if result.reason == "forfeit":
        what += f": {result.detail}"
    return (
        f"[{len(match.games):>{len(str(total))}}/{total}] game {result.index}: "
        f"{result.black} (B) vs {result.white} (W): {what}  |  {match.a} "
        f"{match.rating().describe()}"
    )


def distinct_line(distinct: int, games: int) -> str:
    """``"3 of 4 games distinct move sequences"`` (deterministic engines can repeat a game)."""
    return f"{distinct} of {games} games distinct move sequences"


def print_match(match: MatchResult, out: Path | None, as_json: bool) -> None:
    if as_json:
        print(json.dumps(match.summary(), indent=1))
        return
    r = match.rating()
    print(
        f"{match.a} vs {match.b}: {r.games} games, {match.settings.size}x"
        f"{match.settings.size}, komi {match.settings.komi:g}"
    )
    print(f"  {match.a}: W-L-D {r.wins}-{r.losses}-{r.draws}")
    print(f"  {distinct_line(match.distinct_games(), r.games)}")
    print(
        f"  win rate {100 * r.rate:.1f}% (Wilson 95% [{100 * r.rate_low:.1f}%, "
        f"{100 * r.rate_high:.1f}%])"
    )
    from kgrpc.rating import format_elo

    print(f"  Elo {format_elo(r.elo)} (95% [{format_elo(r.elo_low)}, {format_elo(r.elo_high)}])")
    print("  endings: " + ", ".join(f"{k} {v}" for k, v in sorted(match.reasons().items())))
    if out is not None:
        print(f"  files: {out}/games/*.sgf, {out}/games.csv, {out}/summary.json")


async def cmd_match(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    names = []
    for label, cmd, given in (("A", args.a, args.a_name), ("B", args.b, args.b_name)):
        try:
            command = split_command(cmd)
            name = await preflight(command, settings.size, settings.start_timeout)
        except (EngineError, ValueError) as exc:
            print(f"kgrpc-eval: engine {label} ({cmd}): {exc}", file=sys.stderr)
            return 2
        names.append((given or name, command))
    if names[0][0] == names[1][0]:
        names = [(f"{names[0][0]}-a", names[0][1]), (f"{names[1][0]}-b", names[1][1])]
    a, b = (EngineSpec(n, c) for n, c in names)
    referee = make_referee(args.referee)
    print(
        f"kgrpc-eval: {a.name} vs {b.name}, {settings.games} games, referee {referee.name}",
        file=sys.stderr,
    )
    started = time.monotonic()
    try:
        match = await run_match(
            a,
            b,
            settings,
            referee,
            args.out,
            on_game=lambda g, m: print(progress_line(g, m), file=sys.stderr, flush=True),
        )
    finally:
        await referee.close()
    print(f"kgrpc-eval: done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print_match(match, args.out, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "match":
            return asyncio.run(cmd_match(args))
        from kgrpc.programs.eval.ladder import cmd_ladder

        return asyncio.run(cmd_ladder(args))
    except ValueError as exc:
        print(f"kgrpc-eval: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the coordinator refused or failed: say so, no traceback
        from kgrpc.net import describe, is_rpc_error
        from kgrpc.worker.models import ModelDownloadError

        if not (is_rpc_error(exc) or isinstance(exc, ModelDownloadError)):
            raise
        print(
            f"kgrpc-eval: coordinator {getattr(args, 'coordinator', '')}: {describe(exc)}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
