"""The client subcommands of ``kgrpc-coordinator``, which talk to a running coordinator:

::

    kgrpc-coordinator stats --coordinator HOST:PORT [--json] [--workers N] [--workers-offset N]
    kgrpc-coordinator games list --coordinator HOST:PORT [--model M] [--kind K] [--limit N]
                                 [--before SEQ] [--json]
    kgrpc-coordinator games get --coordinator HOST:PORT GAME_ID [-o FILE.sgf]

``stats`` prints counts, rates, workers online, rejections, a contributors table, a page of
workers (most recent heartbeat first), models, gating matches with their references and the
rating ladder (the latest rating of each model against each reference); ``--json`` prints the same
``Stats`` message with
every number as a JSON number (int64 counters too, which protobuf's own JSON writes as
strings) and enums by name. Text that contributors choose (user names) is printed with
control characters replaced, so it cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from kgrpc.cli_help import env_flag
from kgrpc.net.limits import STATS_MAX_PAGE, STATS_PAGE
from kgrpc.v1 import common_pb2, coordinator_pb2

KINDS = {"selfplay": coordinator_pb2.GAME_KIND_SELFPLAY, "gating": coordinator_pb2.GAME_KIND_GATING}


# ---------------------------------------------------------------------- JSON
def _value(fd: FieldDescriptor, v: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return plain(v)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        ev = fd.enum_type.values_by_number.get(v)
        return ev.name if ev is not None else v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, bytes):
        return v.hex()
    return v


def plain(msg: Message) -> dict[str, Any]:
    """Every field of ``msg`` (defaults included) as plain JSON values: integers of any width
    as numbers, enums by name, a non-finite float as None, bytes as hex."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vfd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {str(k): _value(vfd, v) for k, v in sorted(value.items())}
        elif fd.is_repeated:
            out[fd.name] = [_value(fd, v) for v in value]
        else:
            out[fd.name] = _value(fd, value)
    return out


# ---------------------------------------------------------------------- text
def printable(text: str, width: int | None = None) -> str:
    """``text`` with control characters replaced by ``?``, cut to ``width``."""
    safe = "".join(c if c.isprintable() else "?" for c in text)
    if width is not None and len(safe) > width:
        safe = safe[: width - 1] + "~"
    return safe


def ago(ms: int, now: float | None = None) -> str:
    if not ms:
        return "never"
    s = max(0.0, (time.time() if now is None else now) - ms / 1000)
    if s < 120:
        return f"{s:.0f}s ago"
    if s < 7200:
        return f"{s / 60:.0f}m ago"
    if s < 172800:
        return f"{s / 3600:.0f}h ago"
    return f"{s / 86400:.0f}d ago"


def duration(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s"


def size(n: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def _elo(x: float) -> str:
    return "inf" if math.isinf(x) and x > 0 else "-inf" if math.isinf(x) else f"{x:+.1f}"


def _status(m: common_pb2.ModelInfo) -> str:
    return common_pb2.ModelStatus.Name(m.status).removeprefix("MODEL_STATUS_").lower()


def _more(what: str, offset: int, shown: int, total: int, flag: str) -> list[str]:
    """The line saying a list shows one page of ``total`` (none when it shows them all)."""
    if total <= shown:
        return []
    first = offset + 1
    return [
        f"  ({what} {first}-{first + shown - 1} of {total}: --{flag} N, --{flag}-offset N)"
        if shown
        else f"  ({total} {what}; none from {first}: --{flag}-offset N)"
    ]


def format_stats(
    s: coordinator_pb2.Stats,
    now: float | None = None,
    workers_offset: int = 0,
    models_offset: int = 0,
    matches_offset: int = 0,
) -> str:
    """``kgrpc-coordinator stats`` for people (``*_offset``: where the pages of
    ``s.workers``, ``s.models`` and ``s.matches`` start)."""
    lines = [f"run {printable(s.run)}, up {duration(s.uptime_s)}", ""]
    window = f"last {duration(s.rate_window_s)}" if s.rate_window_s else "no window"
    lines += [
        f"{'games':<12}{s.games_accepted:>12,} accepted {s.games_rejected:>9,} rejected "
        f"{s.games_duplicate:>9,} duplicate {s.games_received:>10,} received",
        f"{'positions':<12}{s.positions_accepted:>12,} accepted "
        f"{s.positions_received:>9,} received",
        f"{'rates':<12}{s.games_per_s:>12.2f} games/s {s.positions_per_s:>10.1f} positions/s "
        f"({window})",
        f"{'shards':<12}{s.shards_written:>12,} written",
        f"{'workers':<12}{s.workers_online:>12,} online "
        f"{max(s.workers_total, len(s.workers)):>11,} known",
    ]
    if s.rejects_by_reason:
        total = sum(s.rejects_by_reason.values())
        lines.append("")
        lines.append(f"rejections by reason ({total:,})")
        for reason, n in sorted(s.rejects_by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {printable(reason, 30):<30}{n:>10,}")
    if s.contributors:
        lines += [
            "",
            f"contributors ({len(s.contributors)})",
            f"  {'account':<20}{'games':>10}{'positions':>12}{'share':>8}{'workers':>9}"
            f"  {'last seen':>12}  display names",
        ]
        for c in s.contributors:
            lines.append(
                f"  {printable(c.username or '(no name)', 20):<20}{c.games:>10,}"
                f"{c.positions:>12,}{c.share:>8.1%}{c.workers:>9}  "
                f"{ago(c.last_seen_unix_ms, now):>12}"
                f"  {printable(', '.join(c.display_names), 40)}".rstrip()
            )
    if s.workers:
        lines += [
            "",
            "workers (most recent heartbeat first)",
            f"  {'worker':<22}{'account':<14}{'host':<16}{'heartbeat':>12}{'accepted':>10}"
            f"{'rejected':>10}  display name",
        ]
        for w in s.workers:
            lines.append(
                f"  {printable(w.worker_id, 22):<22}{printable(w.username, 14):<14}"
                f"{printable(w.hostname, 16):<16}"
                f"{ago(w.last_heartbeat_unix_ms, now):>12}{w.games_accepted:>10,}"
                f"{w.games_rejected:>10,}  {printable(w.display_name, 24)}".rstrip()
            )
        if s.workers_total > len(s.workers):
            first = workers_offset + 1
            lines.append(
                f"  (workers {first}-{first + len(s.workers) - 1} of {s.workers_total}:"
                " --workers N, --workers-offset N, or `kgrpc-coordinator workers list`)"
            )
    if s.models:
        lines += [
            "",
            "models (newest first)",
            f"  {'model':<40}{'status':<10}{'elo':>8}{'steps':>12}{'size':>10}",
        ]
        for m in s.models:
            elo = f"{m.elo:.1f}" if m.elo_measured else "-"  # "-": no gating match rated it
            lines.append(
                f"  {printable(m.name, 40):<40}{_status(m):<10}{elo:>8}"
                f"{m.training_steps:>12,}{size(m.size_bytes):>10}"
            )
        lines += _more("models", models_offset, len(s.models), s.models_total, "models")
    if s.matches:
        lines += [
            "",
            "gating matches (elo of the candidate against its reference)",
            f"  {'candidate':<36}{'reference':<36}{'W-L-D':>11}  {'elo [95% CI]':<26}decision",
        ]
        for m in s.matches:
            wld = f"{m.wins}-{m.losses}-{m.draws}"
            played = m.wins + m.losses + m.draws
            ci = f"{_elo(m.elo_diff)} [{_elo(m.elo_low)}, {_elo(m.elo_high)}]" if played else "-"
            lines.append(
                f"  {printable(m.candidate_model, 36):<36}"
                f"{printable(m.reference_model, 36):<36}{wld:>11}  {ci:<26}"
                f"{printable(m.decision)} ({m.tokens} token{'' if m.tokens == 1 else 's'})"
            )
            if m.waiting:
                lines.append(f"    waiting: {printable(m.waiting)}")
            if m.recount:
                lines.append(
                    f"    its counted games now say {printable(m.recount)} (not undone: "
                    "a quarantine left games out)"
                )
            for a in m.set_aside:
                line = f"    set aside: token {a.token_id} ({a.why}) {a.wins}-{a.losses}-{a.draws}"
                if a.why == "outlier":
                    line += (
                        f" against the others' {a.others_wins} wins of {a.others_games}, "
                        f"p = {a.p_value:.2g}"
                    )
                lines.append(line)
        lines += _more("matches", matches_offset, len(s.matches), s.matches_total, "matches")
    if s.quarantined_tokens:
        lines += ["", "quarantined tokens (their games since then are left out)"]
        for q in s.quarantined_tokens:
            lines.append(
                f"  token {q.token_id} {printable(q.label, 24)!r} since "
                f"{ago(q.since_unix_ms)}: {q.match_games} match games, "
                f"{q.training_games} training games"
            )
    if s.ratings:
        from kgrpc.programs.eval.curve import ladder_lines, records_from_stats

        lines += ["", *ladder_lines(records_from_stats(s))]
    return "\n".join(lines)


def format_games(games: list[coordinator_pb2.GameSummary], now: float | None = None) -> str:
    lines = [
        f"{'seq':>8}  {'game':<36}  {'kind':<8}  {'black':<28}  {'white':<28}"
        f"{'size':>5}{'moves':>6}  {'result':<8}  finished"
    ]
    for g in games:
        kind = coordinator_pb2.GameKind.Name(g.kind).removeprefix("GAME_KIND_").lower()
        lines.append(
            f"{g.seq:>8}  {printable(g.game_id, 36):<36}  {kind:<8}  "
            f"{printable(g.black_model, 28):<28}  {printable(g.white_model, 28):<28}"
            f"{g.board_size:>5}{g.moves:>6}  {printable(g.result, 8):<8}  "
            f"{ago(g.finished_unix_ms, now)}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- commands
# Older names of the variables of --token and --tls-ca, still read (below
# KGRPC_COORDINATOR_TOKEN and KGRPC_COORDINATOR_TLS_CA).
TOKEN_ENV = "KGRPC_TOKEN"
TLS_CA_ENV = "KGRPC_TLS_CA"


def _connection_flags(p: argparse.ArgumentParser) -> None:
    env_flag(
        p,
        "--coordinator",
        required=True,
        metavar="HOST:PORT",
        # (KGRPC_COORDINATOR_COORDINATOR, the rule's name, would read as a typo)
        env="ADDRESS",
        help="address of the running coordinator",
    )
    env_flag(
        p,
        "--token",
        default=None,
        secret=True,
        fallback_env=(TOKEN_ENV,),
        help="access token, any role (best given in the environment: a flag shows in ps)",
    )
    env_flag(
        p,
        "--tls-ca",
        default=None,
        metavar="PEM",
        fallback_env=(TLS_CA_ENV,),
        show="none, plaintext",
        help="CA / self-signed certificate (PEM) for a TLS coordinator",
    )


def add_parsers(sub: Any) -> None:
    """The ``stats`` and ``games`` subcommands (``sub``: the subparsers of a
    :class:`kgrpc.cli_help.ProgramParser`; flags read ``KGRPC_COORDINATOR_<FLAG>``)."""
    stats = sub.add_parser("stats", help="print a running coordinator's statistics")
    _connection_flags(stats)
    env_flag(
        stats,
        "--json",
        action="store_true",
        help="the Stats message as JSON, numbers as numbers",
    )
    env_flag(
        stats,
        "--workers",
        type=int,
        default=STATS_PAGE,
        metavar="N",
        help=f"workers to list, most recent heartbeat first (at most {STATS_MAX_PAGE})",
    )
    env_flag(
        stats,
        "--workers-offset",
        type=int,
        default=0,
        metavar="N",
        help="skip this many workers (the next page)",
    )
    for what, order in (("models", "newest first"), ("matches", "gating matches, newest first")):
        env_flag(
            stats,
            f"--{what}",
            type=int,
            default=STATS_PAGE,
            metavar="N",
            help=f"{what} to list ({order}; at most {STATS_MAX_PAGE})",
        )
        env_flag(
            stats,
            f"--{what}-offset",
            type=int,
            default=0,
            metavar="N",
            help=f"skip this many {what} (the next page)",
        )
    games = sub.add_parser("games", help="list or download the games kept as SGF")
    gsub = games.add_subparsers(dest="games_command", required=True)
    lst = gsub.add_parser("list", help="kept games, newest first")
    _connection_flags(lst)
    env_flag(
        lst,
        "--model",
        default="",
        show="all",
        help="only games of this model (gating: candidate)",
    )
    env_flag(
        lst,
        "--kind",
        choices=sorted(KINDS),
        show="all",
        help="only self-play or gating games",
    )
    env_flag(lst, "--limit", type=int, default=50, help="at most this many")
    env_flag(
        lst,
        "--before",
        type=int,
        default=0,
        metavar="SEQ",
        show="0: from the newest",
        help="only games kept before this seq (paging)",
    )
    env_flag(lst, "--json", action="store_true", help="JSON, numbers as numbers")
    get = gsub.add_parser("get", help="one kept game as SGF")
    _connection_flags(get)
    get.add_argument("game_id")
    env_flag(
        get,
        "-o",
        "--output",
        show="standard output",
        help="write to this file",
    )


async def run(args: argparse.Namespace) -> int:
    import grpc

    from kgrpc.durable import atomic_write_bytes
    from kgrpc.net import describe, make_channel
    from kgrpc.v1 import coordinator_pb2_grpc

    try:
        channel = make_channel(
            args.coordinator, token=args.token or None, tls_ca=args.tls_ca or None
        )
    except ValueError as exc:  # an unreadable --tls-ca
        print(f"kgrpc-coordinator {args.command}: {exc}", file=sys.stderr)
        return 2
    async with channel as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        try:
            if args.command == "stats":
                req = coordinator_pb2.GetStatsRequest(
                    workers_offset=args.workers_offset,
                    workers_limit=args.workers,
                    models_offset=args.models_offset,
                    models_limit=args.models,
                    matches_offset=args.matches_offset,
                    matches_limit=args.matches,
                )
                s = await stub.GetStats(req, timeout=30)
                print(
                    json.dumps(plain(s), indent=2)
                    if args.json
                    else format_stats(
                        s,
                        workers_offset=args.workers_offset,
                        models_offset=args.models_offset,
                        matches_offset=args.matches_offset,
                    )
                )
            elif args.games_command == "list":
                req = coordinator_pb2.ListGamesRequest(
                    model=args.model,
                    kind=KINDS.get(args.kind or "", 0),
                    limit=args.limit,
                    before_seq=args.before,
                )
                resp = await stub.ListGames(req, timeout=30)
                if args.json:
                    print(json.dumps(plain(resp), indent=2))
                else:
                    print(format_games(list(resp.games)))
            else:
                got = await stub.DownloadGame(
                    coordinator_pb2.DownloadGameRequest(game_id=args.game_id), timeout=60
                )
                if args.output:
                    atomic_write_bytes(Path(args.output), got.sgf.encode())
                else:
                    sys.stdout.write(got.sgf)
        except grpc.aio.AioRpcError as exc:
            print(
                f"kgrpc-coordinator {args.command}: coordinator {args.coordinator}: "
                f"{describe(exc)}",
                file=sys.stderr,
            )
            return 1
    return 0
