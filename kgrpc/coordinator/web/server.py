"""The dashboard's HTTP server: aiohttp on the coordinator's event loop, read-only.

Routes (all GET)::

    /                      the page (overview, Elo, models, contributors, matches, games)
    /static/NAME           its script, styles and uPlot (shipped in the package, no CDN)
    /api/overview          counts, rates, workers online, current model, rejections
    /api/elo               Elo series over time (gating; the rating ladder adds its own)
    /api/models            every model with its gating match and download path
    /api/contributors      accepted games by account (token label)
    /api/matches           gating matches, newest first (tokens counted, tokens set aside)
    /api/quarantined       tokens under quarantine, with their games left out
    /api/games             kept games, newest first (?model= &kind= &limit= &before=)
    /api/game?id=ID        one kept game for the board viewer
    /sgf?id=ID             one kept game as an SGF download
    /models/NAME.onnx      a model's fp32 file; NAME.fp16.onnx, NAME.int8.onnx its other files
    /metrics               Prometheus metrics (kgrpc.coordinator.metrics)

Queries run on the read-only connection's thread (:class:`kgrpc.coordinator.reader.Reader`),
files are read off the event loop. Every answer carries a Content-Security-Policy that allows
scripts, styles and requests from this origin only (no inline script, no ``eval``), and the
page builds its DOM with ``textContent``, so names that contributors choose are shown, never
run. Numbers in the JSON are numbers. The listening address and the URL are written to
``DATA_DIR/coordinator.http`` (``http://host:port/``, atomically) once bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from kgrpc.coordinator import blobs, kept_games, model_views, sgf_index, views
from kgrpc.coordinator.downloads import read_chunks
from kgrpc.coordinator.errors import CoordinatorError, invalid
from kgrpc.coordinator.models import NAME_RE
from kgrpc.coordinator.web import HTTP_FILE
from kgrpc.coordinator.web.boardview import viewer_data
from kgrpc.durable import atomic_write_bytes
from kgrpc.net.metrics import bound_port, metrics_handler, parse_listen, url
from kgrpc.precision import SUFFIX, base_path, precision_of_path, variant_file_name

if TYPE_CHECKING:
    from kgrpc.coordinator.server import CoordinatorApp

log = logging.getLogger("kgrpc.coordinator.web")

STATIC_DIR = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dumps(data: Any) -> str:
    # allow_nan=False: a NaN or infinity would be invalid JSON; views turn them into None.
    return json.dumps(data, allow_nan=False, separators=(",", ":"))


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


@web.middleware
async def headers_and_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Security headers on every answer; JSON errors under /api/."""
    try:
        resp = await handler(request)
    except web.HTTPException as exc:
        if not request.path.startswith("/api/"):
            exc.headers.update(SECURITY_HEADERS)
            raise
        resp = json_response({"error": exc.reason}, status=exc.status)
    except CoordinatorError as exc:
        resp = json_response({"error": exc.message}, status=400)
    resp.headers.update(SECURITY_HEADERS)
    if request.path.startswith("/api/"):
        resp.headers["Cache-Control"] = "no-store"
    return resp


def _int_param(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise invalid(f"{name} must be an integer, got {text!r}") from None


class Dashboard:
    """The dashboard of ``app`` (a started :class:`~kgrpc.coordinator.server.CoordinatorApp`)."""

    def __init__(self, app: CoordinatorApp) -> None:
        self.app = app
        self.reader = app.reader
        self.settings = app.view_settings
        self.web = web.Application(middlewares=[headers_and_errors])
        r = self.web.router
        r.add_get("/", self.index)
        r.add_static("/static/", STATIC_DIR, follow_symlinks=False, show_index=False)
        r.add_get("/api/overview", self.overview)
        r.add_get("/api/elo", self.elo)
        r.add_get("/api/models", self.models)
        r.add_get("/api/contributors", self.contributors)
        r.add_get("/api/matches", self.matches)
        r.add_get("/api/games", self.games)
        r.add_get("/api/quarantined", self.quarantined)
        r.add_get("/api/game", self.game)
        r.add_get("/sgf", self.sgf)
        r.add_get(r"/models/{name:[^/]+}.onnx", self.model_file)
        r.add_get("/metrics", metrics_handler(app.metrics.families, app.refresh_metrics))
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        return url(self.host, self.port)

    async def start(self, listen: str) -> int:
        """Listen on ``listen`` (``PORT`` alone: on 127.0.0.1); the bound port."""
        self.host, port = parse_listen(listen)
        self._runner = web.AppRunner(self.web, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, port).start()
        self.port = bound_port(self._runner, port)
        await asyncio.to_thread(
            atomic_write_bytes, self.app.data_dir / HTTP_FILE, f"{self.url}\n".encode()
        )
        log.info("dashboard on %s", self.url)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ pages
    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def overview(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.run(views.overview, self.settings))

    async def elo(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.run(model_views.elo))

    async def models(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.run(model_views.models))

    async def contributors(self, request: web.Request) -> web.Response:
        return json_response(
            await self.reader.run(
                views.contributors, self.reader.activity, self.settings.display_names
            )
        )

    async def matches(self, request: web.Request) -> web.Response:
        return json_response(
            await self.reader.run(model_views.matches, self.settings.gating_min_tokens)
        )

    async def quarantined(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.run(model_views.quarantined_tokens))

    async def games(self, request: web.Request) -> web.Response:
        model = request.query.get("model", "")
        kind = request.query.get("kind", "")
        limit = _int_param(request, "limit", 50)
        before = _int_param(request, "before", 0)
        rows = await self.reader.run(sgf_index.list_kept, model, kind, limit, before)
        return json_response({"games": [g.to_json() for g in rows]})

    async def _kept(self, request: web.Request) -> kept_games.KeptGame:
        game_id = request.query.get("id", "")
        if not game_id:
            raise web.HTTPBadRequest(reason="give the game as ?id=GAME_ID")
        game = await self.reader.run(sgf_index.find, game_id)
        if game is None:
            raise web.HTTPNotFound(reason=f"no kept game {game_id!r}")
        return game

    async def game(self, request: web.Request) -> web.Response:
        game = await self._kept(request)
        text = await self.app.archive.read_text(game)  # DATA_DIR/sgf/ or the blob store
        data = await asyncio.to_thread(viewer_data, text)
        data["game"] = game.to_json()
        data["sgf"] = "/sgf?id=" + quote(game.game_id, safe="")
        return json_response(data)

    async def sgf(self, request: web.Request) -> web.StreamResponse:
        game = await self._kept(request)
        text = await self.app.archive.read_text(game)  # DATA_DIR/sgf/ or the blob store
        resp = web.Response(body=text.encode("utf-8"))
        resp.content_type = "application/x-go-sgf"
        name = kept_games.safe_name(game.game_id)
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}.sgf"'
        return resp

    async def model_file(self, request: web.Request) -> web.StreamResponse:
        """``NAME.onnx`` (fp32) or ``NAME.PRECISION.onnx``: a file the model_files table has."""
        file_name = request.match_info["name"] + SUFFIX
        precision = precision_of_path(file_name)
        name = base_path(file_name).name[: -len(SUFFIX)]
        if not NAME_RE.fullmatch(name) or not await self.reader.run(
            _model_file_exists, name, precision
        ):
            raise web.HTTPNotFound(reason=f"no {precision} file of model {name!r}")
        file_name = variant_file_name(name, precision)  # rebuilt from the checked parts
        path = self.app.data_dir / "models" / file_name
        key = blobs.model_key(file_name)
        disposition = f'attachment; filename="{file_name}"'
        if blobs.in_place(self.app.blobs, key, path):
            resp = web.FileResponse(path)
            resp.content_type = "application/octet-stream"
            resp.headers["Content-Disposition"] = disposition
            return resp
        # Another store (S3): streamed from it in ranged reads.
        stream = web.StreamResponse(
            headers={"Content-Type": "application/octet-stream", "Content-Disposition": disposition}
        )
        await stream.prepare(request)
        async for _, data in read_chunks(blobs.BlobRef(self.app.blobs, key), 0):
            await stream.write(data)
        await stream.write_eof()
        return stream


def _model_file_exists(conn: Any, name: str, precision: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM model_files WHERE model = ? AND precision = ?", (name, precision)
    ).fetchone()
    return row is not None
