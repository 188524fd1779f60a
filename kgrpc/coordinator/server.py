"""The coordinator gRPC server: servicers for every Coordinator RPC, health, reflection.

Threads and processes: the event loop only moves messages. Every database and file
operation runs on one storage thread (so SQLite and the journal have a single
owner and need no locks); game validation (the replay) runs in a process pool with
the spawn start method (never fork after gRPC objects exist).

On start the bound address is logged and written to ``DATA_DIR/coordinator.port``
(``host:port``, atomically), so a caller that asked for port 0 can find it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import io
import logging
import multiprocessing
import os
import re
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import zstandard
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kgrpc.coordinator import auth, model_check, validate
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.errors import CoordinatorError, denied, invalid, not_found
from kgrpc.coordinator.models import Models
from kgrpc.coordinator.store import GameOutcome, Store
from kgrpc.durable import atomic_write_bytes
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2

log = logging.getLogger("kgrpc.coordinator")
T = TypeVar("T")
SERVICE_NAME = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name
CHUNK_BYTES = 1 << 20
PORT_FILE = "coordinator.port"
# The worker ids Register issues.
WORKER_ID_RE = re.compile(r"w-[0-9a-f]{16}")
STATUS_PROTO = {
    "accepted": coordinator_pb2.GAME_STATUS_ACCEPTED,
    "duplicate": coordinator_pb2.GAME_STATUS_DUPLICATE,
    "rejected": coordinator_pb2.GAME_STATUS_REJECTED,
}


def _unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn CoordinatorError into the matching gRPC status."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(self, request, context)
        except CoordinatorError as exc:
            await context.abort(exc.code, exc.message)

    return wrapper


def _streaming(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            async for item in fn(self, request, context):
                yield item
        except CoordinatorError as exc:
            await context.abort(exc.code, exc.message)

    return wrapper


# A game's serialized size is bounded by its moves: a search target holds at most 362 policy
# entries (about 3 KB even unpacked), a move index at most 6 bytes. Anything larger is not a
# game of at most ``max_moves`` moves, and must not be parsed (a few kilobytes of zstd can
# expand to millions of empty nested messages, gigabytes once parsed).
BYTES_PER_MOVE = 4096
BYTES_PER_GAME = 64 * 1024


def max_game_bytes(max_moves: int) -> int:
    return max_moves * BYTES_PER_MOVE + BYTES_PER_GAME


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def split_batch(raw: bytes, max_games: int, max_bytes_per_game: int) -> list[bytes]:
    """The serialized games of a ``GameBatch`` (field 1), read from the wire format without
    parsing them; at most ``max_games`` top-level fields and ``max_bytes_per_game`` per game,
    so a hostile batch costs a bounded number of steps and no memory beyond its bytes."""
    games: list[bytes] = []
    pos = fields = 0
    while pos < len(raw):
        fields += 1
        if fields > max_games:
            raise invalid(f"more than {max_games} games in one message")
        try:
            key, pos = _varint(raw, pos)
            wire = key & 7
            if wire == 0:
                _, pos = _varint(raw, pos)
                end = pos
            elif wire == 1:
                end = pos + 8
            elif wire == 5:
                end = pos + 4
            elif wire == 2:
                length, pos = _varint(raw, pos)
                end = pos + length
            else:
                raise ValueError(f"wire type {wire}")
            if end > len(raw) or key >> 3 == 0:
                raise ValueError("truncated field")
        except ValueError as exc:
            raise invalid(f"games_zstd does not decode to a GameBatch: {exc}") from None
        if key >> 3 == 1:
            if wire != 2:
                raise invalid("games_zstd does not decode to a GameBatch: field 1 is not length-delimited")
            if end - pos > max_bytes_per_game:
                raise invalid(f"game {len(games)} is {end - pos} bytes, more than a game of the accepted length takes ({max_bytes_per_game})")
            games.append(raw[pos:end])
        pos = end  # other fields: unknown, skipped as protobuf would
    return games


def decode_batch(req: coordinator_pb2.UploadGamesRequest, max_bytes: int, max_games: int, max_bytes_per_game: int | None = None) -> list[bytes]:
    """Decompress and split an upload message into serialized games (INVALID_ARGUMENT on bad input)."""
    if req.game_count <= 0:
        raise invalid(f"game_count must be positive, got {req.game_count}")
    if req.game_count > max_games:
        raise invalid(f"{req.game_count} games in one message; at most {max_games}")
    try:
        # Across frames: concatenated zstd frames are one stream (what `zstd` and streaming
        # compressors in other languages may produce); without it only the first is read.
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(req.games_zstd), read_across_frames=True)
        raw = reader.read(max_bytes + 1)
    except zstandard.ZstdError as exc:
        raise invalid(f"games_zstd is not valid zstd data: {exc}") from None
    if len(raw) > max_bytes:
        raise invalid(f"decompressed batch exceeds {max_bytes} bytes")
    games = split_batch(raw, max_games, max_bytes if max_bytes_per_game is None else max_bytes_per_game)
    if len(games) != req.game_count:
        raise invalid(f"game_count says {req.game_count} but the batch holds {len(games)} games")
    return games


def game_heads(games: list[bytes]) -> list[tuple[str, str] | None]:
    """(game_id, worker_id as the record states it) of each serialized game; None for one
    that does not parse."""
    heads: list[tuple[str, str] | None] = []
    for data in games:
        head = records_pb2.GameRecord()
        try:
            head.MergeFromString(data)
        except Exception:  # noqa: BLE001 - protobuf DecodeError
            heads.append(None)
            continue
        heads.append((head.game_id, head.worker_id))
    return heads


def upload_bucket(caller: auth.TokenInfo | None) -> str:
    """The worker id that games without one (and refused claims) are counted under: one per
    token (``token-<id>``), ``anonymous`` with auth off. Register never issues such ids."""
    return f"token-{caller.id}" if caller else "anonymous"


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, app: CoordinatorApp) -> None:
        self.app = app

    # ------------------------------------------------------------------ helpers
    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.app.db(fn, *args)

    def caller(self, context: grpc.aio.ServicerContext) -> auth.TokenInfo | None:
        if not self.app.cfg.auth or self.app.checker is None:
            return None
        token = auth.bearer_token(context.invocation_metadata())
        return self.app.checker.lookup(token) if token else None

    # ------------------------------------------------------------------ workers
    @_unary
    async def Register(self, request: coordinator_pb2.RegisterRequest, context: grpc.aio.ServicerContext) -> coordinator_pb2.RegisterResponse:
        caller = self.caller(context)
        token_id = caller.id if caller else None

        def register(conn: sqlite3.Connection) -> str:
            now = int(time.time() * 1000)
            prev = request.previous_worker_id
            if prev:
                row = conn.execute("SELECT token_id FROM workers WHERE worker_id = ?", (prev,)).fetchone()
                # Only a worker registered under this very token is handed back (with auth off:
                # one registered without a token); never another token's, nor an ownerless row.
                if row is not None and row["token_id"] == token_id:
                    conn.execute(
                        "UPDATE workers SET username = ?, hostname = ?, version = ?, last_heartbeat_ms = ? WHERE worker_id = ?",
                        (request.username, request.hostname, request.version, now, prev),
                    )
                    return prev
                if row is None and WORKER_ID_RE.fullmatch(prev):
                    # An id this index does not know at all (restored from an older backup):
                    # nobody owns it; giving it back keeps the worker's spooled games valid.
                    conn.execute(
                        "INSERT INTO workers (worker_id, token_id, username, hostname, version, registered_ms, last_heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (prev, token_id, request.username, request.hostname, request.version, now, now),
                    )
                    return prev
                log.warning("Register: previous worker id %r is not this token's; issuing a new one", prev)
            wid = "w-" + uuid.uuid4().hex[:16]
            conn.execute(
                "INSERT INTO workers (worker_id, token_id, username, hostname, version, registered_ms, last_heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (wid, token_id, request.username, request.hostname, request.version, now, now),
            )
            return wid

        wid = await self.db(register, self.app.store.conn)
        c = self.app.cfg
        log.info("worker %s registered (user %r, host %r)", wid, request.username, request.hostname)
        return coordinator_pb2.RegisterResponse(
            worker_id=wid,
            heartbeat_interval_s=c.heartbeat_interval_s,
            settings=coordinator_pb2.SelfPlaySettings(
                games_per_batch=c.games_per_batch,
                full_search_prob=c.full_search_prob,
                cheap_visits=c.cheap_visits,
                temperature_moves_19=c.temperature_moves_19,
                dirichlet_alpha_19=c.dirichlet_alpha_19,
                noise_fraction=c.noise_fraction,
                resign_threshold=c.resign_threshold,
                resign_playout_fraction=c.resign_playout_fraction,
                max_moves_per_point=c.max_moves_per_point,
            ),
        )

    @_unary
    async def Heartbeat(self, request: coordinator_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext) -> coordinator_pb2.HeartbeatResponse:
        stats_json = json_format.MessageToJson(request.stats, indent=None)
        caller = self.caller(context)

        def beat(conn: sqlite3.Connection) -> None:
            self.app.check_own_worker(request.worker_id, caller)
            conn.execute(
                "UPDATE workers SET last_heartbeat_ms = ?, stats_json = ? WHERE worker_id = ?",
                (int(time.time() * 1000), stats_json, request.worker_id),
            )

        await self.db(beat, self.app.store.conn)
        best = await self.db(self.app.models.best_info)
        return coordinator_pb2.HeartbeatResponse(latest_model=best.name if best else "")

    @_unary
    async def GetTask(self, request: coordinator_pb2.GetTaskRequest, context: grpc.aio.ServicerContext) -> coordinator_pb2.Task:
        m = self.app.models
        caller = self.caller(context)

        def pick() -> coordinator_pb2.Task:
            best = m.best()
            c = self.app.cfg
            if best is None:
                return coordinator_pb2.Task(task_id="wait", retry_after_s=c.retry_after_s)
            stage = m.stage()
            task = coordinator_pb2.Task(
                rules=auth_rules(c.rules), komi=c.komi, board_size=stage.board_size, visits=stage.visits,
                max_moves=c.max_moves,  # longer games would be rejected as too_long
            )
            # A match chunk goes only to a worker the caller may report for (registered under its
            # token); anyone else plays self-play, whose games are validated on upload anyway.
            spec = m.next_match_task(request.worker_id) if self.app.owns_worker(request.worker_id, caller) else None
            if spec is not None:
                task.task_id = spec.task_id
                task.match.CopyFrom(
                    coordinator_pb2.MatchTask(candidate_model=spec.candidate, reference_model=spec.reference, games=spec.games)
                )
            else:
                task.task_id = "selfplay-" + uuid.uuid4().hex[:12]
                task.selfplay.CopyFrom(coordinator_pb2.SelfPlayTask(model=best["name"], games=c.selfplay_task_games))
            return task

        return await self.db(pick)

    @_unary
    async def UploadGames(self, request_iterator: AsyncIterator[coordinator_pb2.UploadGamesRequest], context: grpc.aio.ServicerContext) -> coordinator_pb2.UploadGamesResponse:
        caller = self.caller(context)
        resp = coordinator_pb2.UploadGamesResponse()
        async for req in request_iterator:
            acks = await self.app.ingest_message(req, caller)
            resp.acks.extend(acks)
        for a in resp.acks:
            if a.status == coordinator_pb2.GAME_STATUS_ACCEPTED:
                resp.accepted += 1
            elif a.status == coordinator_pb2.GAME_STATUS_DUPLICATE:
                resp.duplicates += 1
            else:
                resp.rejected += 1
        return resp

    # ------------------------------------------------------------------ models
    @_unary
    async def GetLatestModel(self, request: Any, context: grpc.aio.ServicerContext) -> coordinator_pb2.GetLatestModelResponse:
        best = await self.db(self.app.models.best_info)
        if best is None:
            return coordinator_pb2.GetLatestModelResponse(found=False)
        return coordinator_pb2.GetLatestModelResponse(found=True, model=best)

    @_unary
    async def ListModels(self, request: Any, context: grpc.aio.ServicerContext) -> coordinator_pb2.ListModelsResponse:
        return coordinator_pb2.ListModelsResponse(models=await self.db(self.app.models.all))

    @_streaming
    async def DownloadModel(self, request: coordinator_pb2.DownloadModelRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[coordinator_pb2.ModelChunk]:
        info = await self.db(self.app.models.info, request.name)
        path = await self.db(self.app.models.path, request.name)
        if not 0 <= request.offset <= info.size_bytes:
            raise CoordinatorError(grpc.StatusCode.OUT_OF_RANGE, f"offset {request.offset} outside 0..{info.size_bytes}")
        first = True
        async for offset, data in _read_chunks(path, request.offset):
            msg = coordinator_pb2.ModelChunk(offset=offset, data=data)
            if first:
                msg.info.CopyFrom(info)
                first = False
            yield msg
        if first:  # offset == size: still send the info
            yield coordinator_pb2.ModelChunk(info=info, offset=request.offset)

    async def WatchModels(self, request: coordinator_pb2.WatchModelsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[coordinator_pb2.ModelRelease]:
        queue: asyncio.Queue[common_pb2.ModelInfo] = asyncio.Queue()
        self.app.watchers.add(queue)
        try:
            best = await self.db(self.app.models.best_info)
            last = request.known_model
            if best is not None and best.name != last:
                last = best.name
                yield coordinator_pb2.ModelRelease(model=best)
            while True:
                info = await queue.get()
                if info.name != last:
                    last = info.name
                    yield coordinator_pb2.ModelRelease(model=info)
        finally:
            self.app.watchers.discard(queue)

    @_unary
    async def PublishModel(self, request_iterator: AsyncIterator[coordinator_pb2.PublishModelRequest], context: grpc.aio.ServicerContext) -> coordinator_pb2.PublishModelResponse:
        return await self.app.publish(request_iterator)

    @_unary
    async def ReportMatchResult(self, request: coordinator_pb2.ReportMatchResultRequest, context: grpc.aio.ServicerContext) -> coordinator_pb2.ReportMatchResultResponse:
        caller = self.caller(context)
        check = functools.partial(self.app.check_own_worker, caller=caller, action="report match results for", missing=denied)
        out = await self.db(self.app.models.report, request, check)
        if out.released is not None:
            self.app.announce(out.released)
        return coordinator_pb2.ReportMatchResultResponse(games_recorded=out.recorded, decision=out.decision)

    # ------------------------------------------------------------------ stats and shards
    @_unary
    async def GetStats(self, request: Any, context: grpc.aio.ServicerContext) -> coordinator_pb2.Stats:
        return await self.db(self.app.stats)

    @_unary
    async def ListShards(self, request: coordinator_pb2.ListShardsRequest, context: grpc.aio.ServicerContext) -> coordinator_pb2.ListShardsResponse:
        rows = await self.db(self.app.store.list_shards, request.run or None, request.after_index)
        return coordinator_pb2.ListShardsResponse(
            shards=[
                coordinator_pb2.ShardInfo(
                    run=r.run, index=r.index, file_name=r.file_name, size_bytes=r.size_bytes, sha256=r.sha256,
                    games=r.games, positions=r.positions, board_size=r.board_size,
                )
                for r in rows
            ]
        )

    @_streaming
    async def DownloadShard(self, request: coordinator_pb2.DownloadShardRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[coordinator_pb2.FileChunk]:
        run = request.run or self.app.cfg.run
        path = await self.db(self.app.store.shard_path, run, request.file_name)
        if path is None:
            raise not_found(f"no shard {request.file_name!r} in run {run!r}")
        size = path.stat().st_size
        if not 0 <= request.offset <= size:
            raise CoordinatorError(grpc.StatusCode.OUT_OF_RANGE, f"offset {request.offset} outside 0..{size}")
        first = True
        async for offset, data in _read_chunks(path, request.offset):
            yield coordinator_pb2.FileChunk(offset=offset, data=data, size_bytes=size if first else 0)
            first = False
        if first:
            yield coordinator_pb2.FileChunk(offset=request.offset, size_bytes=size)


def auth_rules(name: str) -> common_pb2.Rules:
    from kgrpc.go.rules import Rules

    return Rules.from_name(name).to_proto()


async def _read_chunks(path: Path, offset: int) -> AsyncIterator[tuple[int, bytes]]:
    f = await asyncio.to_thread(open, path, "rb")
    try:
        await asyncio.to_thread(f.seek, offset)
        while True:
            data = await asyncio.to_thread(f.read, CHUNK_BYTES)
            if not data:
                return
            yield offset, data
            offset += len(data)
    finally:
        f.close()


class CoordinatorApp:
    """Owns the server, the storage thread, the validation pool and the state."""

    def __init__(self, cfg: Config) -> None:
        cfg.check()
        self.cfg = cfg
        self.data_dir = Path(cfg.data_dir)
        self.started = time.time()
        self.watchers: set[asyncio.Queue[common_pb2.ModelInfo]] = set()
        self.storage = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-storage")
        self.pool: concurrent.futures.Executor | None = None
        self.server: grpc.aio.Server | None = None
        self.health: health.aio.HealthServicer | None = None
        self.checker: auth.TokenChecker | None = None
        self.port = 0
        self._flusher: asyncio.Task[None] | None = None
        self._cut_lock = asyncio.Lock()
        self._stopped = False
        self.settings = validate.ValidationSettings.from_config(cfg)

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.storage, functools.partial(fn, *args))

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> int:
        cfg = self.cfg
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "models").mkdir(exist_ok=True)

        def open_state() -> None:
            self.store = Store(cfg.data_dir, cfg.run, positions_per_shard=cfg.positions_per_shard, latest_window_positions=cfg.latest_window_positions)
            self.models = Models(self.store.conn, self.data_dir / "models", cfg)
            for tmp in (self.data_dir / "models").glob(".*.tmp*"):
                tmp.unlink(missing_ok=True)

        await self.db(open_state)
        rec = self.store.recovery
        if rec.adopted_shards or rec.dropped_entries or rec.restored_games or rec.missing_games or rec.quarantined_shards or rec.journal_damage:
            log.warning("recovery: %s", rec)
        log.info("%d games pending in the ingest journal", rec.pending_games)
        workers = cfg.resolved_validate_workers()
        self.pool = self._make_pool()
        if workers >= 0:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(self.pool, validate.warm_up) for _ in range(workers)))
        self.checker = auth.TokenChecker(cfg.data_dir)
        max_bytes = cfg.max_receive_mb * 1024 * 1024
        options = [
            ("grpc.max_receive_message_length", max_bytes),
            ("grpc.max_send_message_length", max_bytes),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        interceptors = [auth.AuthInterceptor(self.checker.lookup)] if cfg.auth else []
        self.server = grpc.aio.server(interceptors=interceptors, options=options)
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(self), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        if cfg.tls_cert:
            creds = grpc.ssl_server_credentials([(Path(cfg.tls_key).read_bytes(), Path(cfg.tls_cert).read_bytes())])
            self.port = self.server.add_secure_port(cfg.listen, creds)
        else:
            self.port = self.server.add_insecure_port(cfg.listen)
        if self.port == 0:
            raise OSError(f"could not listen on {cfg.listen}")
        await self.server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        host = cfg.listen.rsplit(":", 1)[0]
        atomic_write_bytes(self.data_dir / PORT_FILE, f"{host}:{self.port}\n".encode())
        log.info("kgrpc-coordinator listening on %s:%d (%s, auth %s), data in %s", host, self.port,
                 "TLS" if cfg.tls_cert else "plaintext", "on" if cfg.auth else "OFF", self.data_dir)
        self._flusher = asyncio.ensure_future(self._flush_loop())
        return self.port

    def _make_pool(self) -> concurrent.futures.Executor:
        workers = self.cfg.resolved_validate_workers()
        if workers < 0:
            return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-validate")
        return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))

    async def _validate(self, groups: list[list[tuple[bytes, str]]]) -> list[list[GameOutcome]]:
        """Validate groups of games in the pool. A pool whose process died (killed for memory,
        crashed) is broken for good: replace it and try once more, then answer UNAVAILABLE."""
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            pool = self.pool
            assert pool is not None
            try:
                return list(await asyncio.gather(*(loop.run_in_executor(pool, validate.validate_many, g, self.settings) for g in groups)))
            except concurrent.futures.BrokenExecutor as exc:
                if self.pool is pool and not self._stopped:
                    log.error("validation pool broken (%s): starting a new one", exc)
                    self.pool = self._make_pool()
                    pool.shutdown(wait=False, cancel_futures=True)
                if attempt or self._stopped:
                    raise CoordinatorError(grpc.StatusCode.UNAVAILABLE, "game validation failed (worker process died); retry later") from None
        raise AssertionError("unreachable")

    @property
    def address(self) -> str:
        return f"{self.cfg.listen.rsplit(':', 1)[0]}:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking calls, let in-flight ones finish (``grace`` s), close storage."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.cfg.shutdown_grace_s if grace is None else grace
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self._flusher is not None:
            self._flusher.cancel()
        if self.server is not None:
            await self.server.stop(grace)
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if hasattr(self, "store"):
            await self.db(self.store.close)
        self.storage.shutdown(wait=True)
        if self.checker is not None:
            self.checker.close()
        log.info("coordinator stopped")

    async def _flush_loop(self) -> None:
        period = max(0.5, min(60.0, self.cfg.flush_interval_s / 4))
        while True:
            await asyncio.sleep(period)
            try:
                async with self._cut_lock:
                    await self.db(functools.partial(self.store.cut_ready, older_than_s=self.cfg.flush_interval_s))
            except Exception:  # noqa: BLE001 - keep flushing later; the journal keeps the games
                log.exception("time-based shard flush failed")

    # ------------------------------------------------------------------ ingest
    async def ingest_message(self, req: coordinator_pb2.UploadGamesRequest, caller: auth.TokenInfo | None) -> list[coordinator_pb2.GameAck]:
        """Validate and store one upload message. A record's ``worker_id`` must be empty or a
        worker registered under the caller's token (any registered worker with auth off);
        otherwise the game is refused as ``worker_mismatch``. Games without a worker id, and
        refused claims, are counted under the caller's bucket (:func:`upload_bucket`)."""
        cfg = self.cfg
        bucket = upload_bucket(caller)

        def decode() -> tuple[list[bytes], list[tuple[str, str] | None]]:
            # Off the event loop whatever the compressed size: a small message may expand a lot.
            games = decode_batch(req, cfg.max_decompressed_mb << 20, cfg.max_games_per_message, max_game_bytes(cfg.max_moves))
            return games, game_heads(games)

        games, parsed = await asyncio.to_thread(decode)
        outcomes: list[GameOutcome | None] = [None] * len(games)
        heads: list[tuple[str, str]] = []
        for i, h in enumerate(parsed):
            if h is None:
                outcomes[i] = GameOutcome("", bucket, False, "undecodable", "game record does not parse")
            heads.append(h or ("", ""))
        owners = await self.db(self._worker_owners, {w for _, w in heads if w})
        known = await self.db(self.store.known_games, [g for g, _ in heads if g])
        todo: list[int] = []
        for i, (gid, wid) in enumerate(heads):
            if outcomes[i] is not None:
                continue
            if not wid:
                heads[i] = (gid, bucket)
            elif wid not in owners:
                outcomes[i] = GameOutcome(gid, bucket, False, "worker_mismatch",
                                          f"worker {wid!r} is not registered: use the id Register returned, or leave worker_id empty")
                continue
            elif caller is not None and owners[wid] != caller.id:
                outcomes[i] = GameOutcome(gid, bucket, False, "worker_mismatch", f"worker {wid!r} is registered under another token")
                continue
            if gid and gid in known:
                outcomes[i] = GameOutcome(gid, heads[i][1], True)
            else:
                todo.append(i)
        if todo:
            groups = _split(todo, max(1, 2 * max(1, cfg.resolved_validate_workers())))
            results = await self._validate([[(games[i], heads[i][1]) for i in g] for g in groups])
            for g, res in zip(groups, results, strict=True):
                for i, o in zip(g, res, strict=True):
                    outcomes[i] = o
        final = [o for o in outcomes if o is not None]
        statuses = await self.db(self._store_outcomes, final, caller, bucket)
        asyncio.ensure_future(self._cut())
        return [
            coordinator_pb2.GameAck(game_id=o.game_id, status=STATUS_PROTO[s], reason=o.reason if s == "rejected" else "", detail=o.detail if s == "rejected" else "")
            for o, s in zip(final, statuses, strict=True)
        ]

    def _worker_owners(self, worker_ids: set[str]) -> dict[str, int | None]:
        """Token id (None: registered without one) of each of ``worker_ids`` that is registered."""
        out: dict[str, int | None] = {}
        for wid in worker_ids:
            row = self.store.conn.execute("SELECT token_id FROM workers WHERE worker_id = ?", (wid,)).fetchone()
            if row is not None:
                out[wid] = row["token_id"]
        return out

    def _store_outcomes(self, outcomes: list[GameOutcome], caller: auth.TokenInfo | None, bucket: str) -> list[str]:
        if any(o.worker_id == bucket for o in outcomes):
            # The bucket's row belongs to its token (so no other token can claim it); an older
            # row of that name without a token (made by earlier versions) is given its owner.
            self.store.conn.execute(
                "INSERT INTO workers (worker_id, token_id, username, registered_ms) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(worker_id) DO UPDATE SET token_id = excluded.token_id WHERE workers.token_id IS NULL",
                (bucket, caller.id if caller else None, caller.label if caller else "", int(time.time() * 1000)),
            )
        return self.store.ingest(outcomes)

    # ------------------------------------------------------------------ worker ownership
    def check_own_worker(self, worker_id: str, caller: auth.TokenInfo | None, action: str = "act for",
                         missing: Callable[[str], CoordinatorError] = not_found) -> None:
        """Raise unless ``worker_id`` is registered, under ``caller``'s token when auth is on
        (``missing``, NOT_FOUND by default, for an unknown worker: a stock worker registers
        again on it; PERMISSION_DENIED for another token's). Storage thread only."""
        row = self.store.conn.execute("SELECT token_id FROM workers WHERE worker_id = ?", (worker_id,)).fetchone()
        if row is None:
            raise missing(f"unknown worker {worker_id!r}: call Register first")
        if caller is not None and row["token_id"] != caller.id:
            raise denied(f"worker {worker_id!r} is not registered under this token: a token may only {action} "
                         "the workers it registered (Register returns their ids)")

    def owns_worker(self, worker_id: str, caller: auth.TokenInfo | None) -> bool:
        try:
            self.check_own_worker(worker_id, caller)
        except CoordinatorError:
            return False
        return True

    async def _cut(self) -> None:
        async with self._cut_lock:
            try:
                await self.db(self.store.cut_ready)
            except Exception:  # noqa: BLE001 - the games stay in the journal; next cut retries
                log.exception("shard cut failed")

    # ------------------------------------------------------------------ models
    def announce(self, info: common_pb2.ModelInfo) -> None:
        log.info("released model %s (elo %.1f)", info.name, info.elo)
        for q in list(self.watchers):
            q.put_nowait(info)

    async def publish(self, request_iterator: AsyncIterator[coordinator_pb2.PublishModelRequest]) -> coordinator_pb2.PublishModelResponse:
        it = request_iterator.__aiter__()
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            raise invalid("empty PublishModel stream: the first message must be the header") from None
        if not first.HasField("header"):
            raise invalid("the first PublishModel message must be the header")
        h = first.header
        max_bytes = self.cfg.max_receive_mb << 20 << 4  # models may span many messages
        await self.db(self.models.check_header, h, max_bytes)
        same = await self.db(self.models.existing_same, h)
        tmp = self.data_dir / "models" / f".{h.name}.onnx.tmp{uuid.uuid4().hex[:8]}"
        sha = hashlib.sha256()
        size = 0
        f = await asyncio.to_thread(open, tmp, "wb")
        try:
            try:
                async for msg in it:
                    if msg.HasField("header"):
                        raise invalid("a second header in one PublishModel stream")
                    size += len(msg.data)
                    if size > h.size_bytes:
                        raise invalid(f"more data than the declared size_bytes {h.size_bytes}")
                    sha.update(msg.data)
                    await asyncio.to_thread(f.write, msg.data)
                await asyncio.to_thread(f.flush)
                await asyncio.to_thread(os.fsync, f.fileno())
            finally:
                f.close()
            if size != h.size_bytes:
                raise invalid(f"received {size} bytes, header declared {h.size_bytes}")
            if sha.hexdigest() != h.sha256:
                raise invalid(f"sha256 mismatch: received data hashes to {sha.hexdigest()}, header says {h.sha256}")
            if same is not None:
                return coordinator_pb2.PublishModelResponse(model=same, gating_scheduled=same.status == common_pb2.MODEL_STATUS_CANDIDATE)
            await model_check.check_published(tmp, h, self.cfg.curriculum)
            try:
                info, gating, released = await self.db(self.models.commit, h, tmp)
            except sqlite3.IntegrityError:
                raise CoordinatorError(grpc.StatusCode.ALREADY_EXISTS, f"model {h.name!r} already exists") from None
        finally:
            tmp.unlink(missing_ok=True)
        log.info("model %s published (%s)", h.name, "gating scheduled" if gating else "released")
        if released:
            self.announce(info)
        return coordinator_pb2.PublishModelResponse(model=info, gating_scheduled=gating)

    # ------------------------------------------------------------------ stats
    def stats(self) -> coordinator_pb2.Stats:
        """Runs on the storage thread."""
        conn = self.store.conn
        c = self.store.counters()
        s = coordinator_pb2.Stats(run=self.cfg.run, uptime_s=int(time.time() - self.started))
        for name in ("games_received", "games_accepted", "games_rejected", "games_duplicate", "positions_received", "positions_accepted", "shards_written"):
            setattr(s, name, c.get(name, 0))
        for k, v in c.items():
            if k.startswith("reject:"):
                s.rejects_by_reason[k[len("reject:"):]] = v
        rejects: dict[str, dict[str, int]] = {}
        for r in conn.execute("SELECT worker_id, reason, count FROM worker_rejects"):
            rejects.setdefault(r["worker_id"], {})[r["reason"]] = r["count"]
        for r in conn.execute("SELECT * FROM workers ORDER BY last_heartbeat_ms DESC"):
            ws = coordinator_pb2.WorkerStatus(
                worker_id=r["worker_id"], username=r["username"], hostname=r["hostname"],
                last_heartbeat_unix_ms=r["last_heartbeat_ms"], games_accepted=r["games_accepted"], games_rejected=r["games_rejected"],
            )
            ws.rejects_by_reason.update(rejects.get(r["worker_id"], {}))
            with contextlib.suppress(json_format.ParseError):
                json_format.Parse(r["stats_json"], ws.stats)
            s.workers.append(ws)
        s.models.extend(self.models.all())
        s.matches.extend(self.models.match_summaries())
        return s


def _split(items: list[int], parts: int) -> list[list[int]]:
    parts = max(1, min(parts, len(items)))
    return [items[i::parts] for i in range(parts)]

