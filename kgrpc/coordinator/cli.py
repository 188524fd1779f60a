"""``kgrpc-coordinator``: serve, stats, games, token, workers, migrate.

::

    kgrpc-coordinator [serve] --listen HOST:PORT --data-dir DIR [--config FILE.toml] [--flag VALUE
    ...]
    kgrpc-coordinator stats --coordinator HOST:PORT [--token T] [--tls-ca PEM] [--json]
                            [--workers N] [--workers-offset N]
    kgrpc-coordinator games list|get --coordinator HOST:PORT ... (kgrpc.coordinator.remote)
    kgrpc-coordinator token create --data-dir DIR --role worker|trainer [--label TEXT]
    kgrpc-coordinator token list --data-dir DIR
    kgrpc-coordinator token revoke --data-dir DIR (--id N | --token T)
    kgrpc-coordinator token quarantine --data-dir DIR --id N [--since TIME]
    kgrpc-coordinator token unquarantine --data-dir DIR --id N
    kgrpc-coordinator workers list --data-dir DIR [--json]
    kgrpc-coordinator workers remove --data-dir DIR [ID ...] [--token-id N]
    kgrpc-coordinator migrate --from DIR --index postgresql://... --store URL

``serve`` is the default when the first argument is a flag. Its settings come from
kgrpc/coordinator/config.py through kgrpc.settings (flag > ``KGRPC_COORDINATOR_<FIELD>`` >
``--config`` file > default; ``--help`` shows each default and variable). The other
subcommands' flags read ``KGRPC_COORDINATOR_<FLAG>`` (kgrpc.cli_help); the token of ``stats``
and ``games`` is best given in ``KGRPC_COORDINATOR_TOKEN`` (or the older ``KGRPC_TOKEN``; a
flag shows in ``ps``), its CA in ``--tls-ca`` or ``KGRPC_COORDINATOR_TLS_CA`` (``KGRPC_TLS_CA``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sqlite3
import sys

from kgrpc import native
from kgrpc.blobstore.settings import STORE_SECRETS
from kgrpc.cli_help import ProgramParser, env_flag
from kgrpc.coordinator import auth, db, migrate, quorum, remote, token_quarantine
from kgrpc.coordinator.config import SETTINGS, config_from_args
from kgrpc.coordinator.remote import TLS_CA_ENV, TOKEN_ENV  # noqa: F401 - the CLI's variables

SUBCOMMANDS = ("serve", "stats", "games", "token", "workers", "migrate")


def storage_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that say where a run's state is, the same on every subcommand that opens it
    (and as ``serve``'s settings ``data_dir`` and ``index``: kgrpc/coordinator/config.py)."""
    env_flag(parser, "--data-dir", required=True, help="the coordinator's data directory")
    env_flag(
        parser,
        "--index",
        default="",
        help="the index: empty for SQLite in the data directory, or postgresql://USER@HOST/DB "
        "(the same value as `serve --index`)",
    )
    env_flag(
        parser,
        "--store",
        default="",
        help="the blob store: empty for the data directory, a directory, or s3://BUCKET/PREFIX "
        "(the same value as `serve --store`; S3 endpoint and keys from the AWS_* variables); "
        "checked before anything is done",
    )


def build_parser() -> argparse.ArgumentParser:
    """``serve``'s settings come from kgrpc.settings; every other flag also reads
    ``KGRPC_COORDINATOR_<FLAG>`` (kgrpc.cli_help: flag > variable > default)."""
    parser = ProgramParser(
        prog="kgrpc-coordinator",
        description="kgrpc coordinator daemon",
        env_program="coordinator",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the coordinator (default)")
    SETTINGS.add_arguments(serve)
    env_flag(
        serve,
        "--log-level",
        default="INFO",
        help="logging level: DEBUG, INFO, WARNING or ERROR",
        group=serve.add_argument_group("logging"),
    )

    remote.add_parsers(sub)

    token = sub.add_parser(
        "token", help="manage access tokens (works on the data dir, server running or not)"
    )
    tsub = token.add_subparsers(dest="token_command", required=True)
    create = tsub.add_parser("create", help="print a new token")
    storage_flags(create)
    env_flag(create, "--role", required=True, choices=auth.ROLES, help="what the token may do")
    env_flag(create, "--label", default="", help="a note for `token list` (e.g. who has it)")
    lst = tsub.add_parser("list", help="list tokens (ids, roles, labels; never the tokens)")
    storage_flags(lst)
    revoke = tsub.add_parser("revoke", help="revoke a token by id or by its text")
    storage_flags(revoke)
    g = revoke.add_mutually_exclusive_group(required=True)
    what = "names what to revoke: give --id or --token"
    env_flag(revoke, "--id", type=int, group=g, no_env=what, help="the token's id (`token list`)")
    env_flag(revoke, "--token", group=g, no_env=what, help="the token's text")
    token_quarantine.add_parsers(tsub, storage_flags)

    wk = sub.add_parser(
        "workers", help="list or remove worker rows (works on the data dir, server running or not)"
    )
    wsub = wk.add_subparsers(dest="workers_command", required=True)
    wl = wsub.add_parser("list", help="every worker, most recent heartbeat first")
    storage_flags(wl)
    env_flag(wl, "--json", action="store_true", help="one JSON object per line")
    wr = wsub.add_parser(
        "remove", help="remove workers by id and/or all of one token's; their stored games stay"
    )
    storage_flags(wr)
    wr.add_argument("ids", nargs="*", metavar="ID")
    env_flag(
        wr,
        "--token-id",
        type=int,
        no_env="names what to remove",
        help="also every worker registered under this token id (see `token list`)",
    )
    migrate.add_parser(sub)
    return parser


async def _serve(cfg_args: argparse.Namespace) -> int:
    from kgrpc.coordinator.server import CoordinatorApp
    from kgrpc.gc_pauses import fewer_full_collections

    # A full collection over a large fleet's objects stops every thread for a second.
    fewer_full_collections()

    cfg = config_from_args(cfg_args)
    if cfg.index:
        # A wrong URL, password or database is one line before anything starts.
        await asyncio.to_thread(lambda: db.connect(cfg.data_dir, index=cfg.index).close())
    app = CoordinatorApp(cfg)
    await app.start()
    print(f"kgrpc-coordinator listening on {app.address}", flush=True)
    if app.dashboard is not None:
        print(f"kgrpc-coordinator dashboard on {app.dashboard.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("kgrpc.coordinator").info(
        "shutting down (grace %.0f s)", cfg.shutdown_grace_s
    )
    await app.stop()
    return 0


def _open_index(args: argparse.Namespace) -> sqlite3.Connection:
    """The index named by ``--data-dir``/``--index``; a bad URL or an unreachable server is
    one line on stderr and exit code 2 (:class:`SystemExit`)."""
    from kgrpc.blobstore import BlobStoreError, open_checked

    try:
        # These commands touch no object, but a wrong --store is said here, as serve says it.
        open_checked(args.store, default_root=args.data_dir).close()
        return db.connect(args.data_dir, index=args.index)
    except (ValueError, sqlite3.Error, BlobStoreError) as exc:
        print(f"kgrpc-coordinator: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _token(args: argparse.Namespace) -> int:
    conn = _open_index(args)
    try:
        if args.token_command == "create":
            text, info = auth.create_token(conn, args.role, args.label)
            print(text)
            print(
                f"(token id {info.id}, role {info.role}; shown once, only its hash is stored)",
                file=sys.stderr,
            )
        elif args.token_command == "list":
            held = quorum.quarantined_since(conn)
            print(f"{'id':>4}  {'role':<8}{'state':<9}{'quarantine':<25}label")
            for t in auth.list_tokens(conn):
                since = held.get(t.id)
                q = "-" if since is None else "since " + token_quarantine.when(since)
                print(
                    f"{t.id:>4}  {t.role:<8}{'revoked' if t.revoked_ms else 'active':<9}"
                    f"{q:<25}{t.label}"
                )
        elif args.token_command in ("quarantine", "unquarantine"):
            return token_quarantine.run(args, conn)
        else:
            if not auth.revoke_token(conn, token_id=args.id, token=args.token):
                print("no such active token", file=sys.stderr)
                return 1
            print("revoked")
    finally:
        conn.close()
    return 0


def _workers(args: argparse.Namespace) -> int:
    from kgrpc.coordinator import workers

    conn = _open_index(args)
    try:
        if args.workers_command == "list":
            if not args.json:
                print(
                    f"{'worker':<22}{'token':>6}  {'heartbeat':>12}{'accepted':>10}"
                    f"{'rejected':>10}  account@host (--username)"
                )
            for r in workers.rows(conn):
                # Credited to the token's label; the worker's own --username is shown to the
                # operator as what it is, a name the worker chose.
                credited = workers.account(r["token_id"], r["token_label"], r["username"])
                if args.json:
                    row = dict(r)
                    row.pop("stats_json")
                    row["account"] = credited
                    print(json.dumps(row))
                    continue
                token = "-" if r["token_id"] is None else str(r["token_id"])
                chosen = f" ({r['username'][:24]})" if r["username"] != credited else ""
                print(
                    f"{r['worker_id'][:21]:<22}{token:>6}  {remote.ago(r['last_heartbeat_ms']):>12}"
                    f"{r['games_accepted']:>10}{r['games_rejected']:>10}  "
                    f"{credited[:24]}@{r['hostname'][:32]}{chosen}"
                )
            return 0
        if not args.ids and args.token_id is None:
            print("name worker ids to remove, or --token-id N", file=sys.stderr)
            return 2
        removed = workers.remove(conn, args.ids, args.token_id)
        missing = sorted(set(args.ids) - set(removed))
        print(f"removed {len(removed)} worker(s)")
        if missing:
            print(f"no such worker: {', '.join(missing)}", file=sys.stderr)
            return 1
        return 0
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv.insert(0, "serve")
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        for warning in SETTINGS.secrets_given_as_flags(args, STORE_SECRETS):
            print(f"kgrpc-coordinator: {warning}", file=sys.stderr)
        native.log_implementation()  # the replay that validates uploads
        try:
            return asyncio.run(_serve(args))
        except (ValueError, OSError, sqlite3.Error) as exc:
            # Bad settings, TLS files, a port in use, an index that cannot be opened.
            print(f"kgrpc-coordinator: {exc}", file=sys.stderr)
            return 2
    if args.command in ("stats", "games"):
        return asyncio.run(remote.run(args))
    if args.command == "workers":
        return _workers(args)
    if args.command == "migrate":
        return migrate.run(args)
    return _token(args)
