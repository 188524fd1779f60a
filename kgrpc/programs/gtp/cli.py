"""``kgrpc-gtp``'s command line: the flags, the player they choose, and the session."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from kgrpc import __version__, native, networks
from kgrpc.cli_help import ProgramParser, env_flag
from kgrpc.go.rules import Rules
from kgrpc.programs.gtp.engine import GtpEngine
from kgrpc.programs.gtp.players import PlayerUnavailable, make_player
from kgrpc.programs.gtp.protocol import serve, start_line_reader

# The token and CA of the coordinator (--coordinator) and the inference servers (--inference):
# from the environment, like every program's (the variables of --token and --tls-ca,
# kgrpc.cli_help).
TOKEN_ENV = "KGRPC_GTP_TOKEN"
TLS_CA_ENV = "KGRPC_GTP_TLS_CA"


def build_parser() -> argparse.ArgumentParser:
    """Every flag also reads ``KGRPC_GTP_<FLAG>`` (kgrpc.cli_help: flag > variable > default)."""
    p = ProgramParser(prog="kgrpc-gtp", description="kgrpc GTP version 2 engine", env_program="gtp")
    env_flag(p, "--rules", default="chinese", help="rules preset")
    env_flag(
        p,
        "--model",
        default="none",
        help="ONNX model file, a shipped network's name (networks/networks.toml: kg9, the "
        "9x9 network), or 'none' for random play; not with --coordinator",
    )
    env_flag(
        p,
        "--coordinator",
        default=None,
        metavar="ADDR[,ADDR]",
        help="play the newest model this run's coordinator (any of these replicas) has "
        "released, downloaded at start into --model-dir; a later release is not taken during "
        "the session. Not with --model",
    )
    env_flag(
        p,
        "--model-dir",
        default=None,
        metavar="DIR",
        show="$XDG_CACHE_HOME/kgrpc/models, else ~/.cache/kgrpc/models",
        help="with --coordinator: where released models are downloaded (the newest few kept)",
    )
    env_flag(p, "--size", type=int, default=19, help="initial board size")
    env_flag(p, "--komi", type=float, default=7.5, help="initial komi")
    env_flag(p, "--seed", type=int, default=None, help="random seed of the player")
    env_flag(
        p,
        "--visits",
        type=int,
        default=800,
        help="MCTS visits per move with --model FILE.onnx; fewer when time_settings/time_left "
        "leave less time",
    )
    env_flag(
        p,
        "--score-utility-factor",
        type=float,
        default=0.0,
        help="weight of the expected score in the search's utility, as in self-play (the learn9 "
        "profile trains with 0.5); 0 = win/loss only",
    )
    env_flag(
        p,
        "--gumbel",
        action="store_true",
        help="choose moves by a Gumbel root search (docs/training.md, 'Gumbel root search') of "
        "--visits simulations; the clock is then not followed, and analysis stays PUCT",
    )
    env_flag(
        p,
        "--gumbel-considered",
        type=int,
        default=16,
        help="with --gumbel: root moves sampled by Gumbel-top-k (the paper's m)",
    )
    env_flag(
        p,
        "--analysis-max-visits",
        type=int,
        default=20000,
        help="kata-analyze stops growing its search at this many visits",
    )
    env_flag(
        p,
        "--inference",
        default=None,
        metavar="ADDR[,ADDR]",
        help="evaluate on these inference servers instead of in-process ONNX Runtime",
    )
    env_flag(
        p,
        "--token",
        default=None,
        secret=True,
        help="token for the coordinator and the inference servers (best given in the environment: "
        "a flag shows in ps)",
    )
    env_flag(
        p,
        "--tls-ca",
        default=None,
        metavar="FILE",
        show="none, plaintext",
        help="CA certificate (PEM) of a TLS coordinator and TLS inference servers",
    )
    return p


async def _run(engine: GtpEngine) -> None:
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    start_line_reader(sys.stdin.fileno(), asyncio.get_running_loop(), queue)
    try:
        with contextlib.suppress(BrokenPipeError):
            await serve(engine, queue, sys.stdout)
    finally:
        await engine.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rules = Rules.from_name(args.rules)
    except ValueError as exc:
        print(f"kgrpc-gtp: {exc}", file=sys.stderr)
        return 2
    if not 2 <= args.size <= 19:
        print(f"kgrpc-gtp: --size {args.size} out of range 2..19", file=sys.stderr)
        return 2
    if args.visits < 1 or args.analysis_max_visits < 1:
        print("kgrpc-gtp: --visits and --analysis-max-visits must be >= 1", file=sys.stderr)
        return 2
    from kgrpc.mcts.config import SearchConfig

    try:  # the search's own check, before a model is loaded
        SearchConfig(
            visits=args.visits,
            score_utility_factor=args.score_utility_factor,
            gumbel=args.gumbel,
            gumbel_considered=args.gumbel_considered,
        )
    except ValueError as exc:
        print(f"kgrpc-gtp: --score-utility-factor / --gumbel-considered: {exc}", file=sys.stderr)
        return 2
    args.token = args.token or None
    args.tls_ca = args.tls_ca or None
    args.coordinator = args.coordinator or None
    if args.coordinator and args.model != "none":
        print(
            "kgrpc-gtp: --model and --coordinator both given: choose one (--coordinator plays "
            "the run's newest release)",
            file=sys.stderr,
        )
        return 2
    if args.tls_ca and (args.inference or args.coordinator):
        from kgrpc.net.channel import load_ca

        try:  # a wrong file fails here, not at the first genmove
            load_ca(args.tls_ca)
        except ValueError as exc:
            print(f"kgrpc-gtp: {exc}", file=sys.stderr)
            return 2
    if args.coordinator:
        from kgrpc.programs.gtp.release import ReleaseUnavailable, default_model_dir, fetch_release

        model_dir = args.model_dir or default_model_dir()
        try:  # once, before the game: the model is the newest release at start
            name, path = asyncio.run(
                fetch_release(args.coordinator, args.token, args.tls_ca, model_dir)
            )
        except ReleaseUnavailable as exc:
            print(f"kgrpc-gtp: {exc}", file=sys.stderr)
            return 2
        print(f"kgrpc-gtp: release {name} of {args.coordinator}", file=sys.stderr)
        args.model = str(path)
    try:  # a shipped network's short name becomes its file, checked against its sha256
        args.model = networks.resolve(args.model)
    except networks.NetworkError as exc:
        print(f"kgrpc-gtp: {exc}", file=sys.stderr)
        return 2
    try:
        player = make_player(args)
    except PlayerUnavailable as exc:
        print(f"kgrpc-gtp: {exc}", file=sys.stderr)
        return 2
    print(f"kgrpc-gtp {__version__}: rules {rules}, model {args.model}", file=sys.stderr)
    print(f"kgrpc-gtp: {native.describe()}", file=sys.stderr)  # stdout is the GTP channel
    engine = GtpEngine(
        player, rules, args.size, args.komi, analysis_max_visits=args.analysis_max_visits
    )
    asyncio.run(_run(engine))
    return 0
