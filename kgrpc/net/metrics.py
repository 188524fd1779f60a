"""Prometheus metrics of both daemons, and the small HTTP server that serves them.

The daemons count in plain Python objects on their event loop (:class:`Histogram` here,
plain integers elsewhere): nothing of prometheus_client is on a hot path, and a daemon
runs without it unless asked to serve metrics. At a scrape, the daemon's ``collect()``
turns its figures into metric families (:func:`counter`, :func:`gauge`,
:func:`histogram`) and :func:`exposition` writes them in the text format. The scrape runs
on the event loop, so it reads the figures between two updates, never in the middle of one.

:class:`MetricsServer` is aiohttp on the daemon's event loop with ``GET /metrics`` only
(the inference server's ``--metrics-listen``); the coordinator serves ``/metrics`` beside
its dashboard (:mod:`kgrpc.coordinator.web`). Both need the ``metrics`` (or ``coordinator``)
extra: aiohttp and prometheus_client (:func:`require`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

log = logging.getLogger("kgrpc.net.metrics")

EXTRA_HINT = (
    "serving the dashboard or metrics needs aiohttp and prometheus_client: "
    "pip install 'kgrpc[coordinator]' (coordinator) or 'kgrpc[metrics]'"
)
Family = Any  # a prometheus_client.core.*MetricFamily
Collect = Callable[[], Iterable[Family]]
DEFAULT_HOST = "127.0.0.1"


def require() -> None:
    """RuntimeError with the install hint unless aiohttp and prometheus_client import."""
    try:
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"{EXTRA_HINT} ({exc})") from None


def parse_listen(addr: str) -> tuple[str, int]:
    """(host, port) of ``PORT``, ``:PORT``, ``HOST:PORT`` or ``[V6]:PORT``; the host is
    127.0.0.1 unless the address names one. ValueError for anything else."""
    text = addr.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bad HTTP address {addr!r}: expected HOST:PORT or PORT") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"bad HTTP address {addr!r}: port outside 0..65535")
    return host or DEFAULT_HOST, number


def url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class Histogram:
    """Counts of observations at or below each bound (cumulative at export), their sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # last: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, values: Iterable[float]) -> None:
        for v in values:
            self.observe(v)

    def buckets(self) -> list[tuple[str, float]]:
        """(upper bound as Prometheus writes it, cumulative count), ``+Inf`` last."""
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out


def counter(
    name: str, doc: str, values: dict[tuple[str, ...], float] | float, labels: Sequence[str] = ()
) -> Family:
    """A counter family ``name`` (exposed as ``name_total``); ``values`` by label values."""
    from prometheus_client.core import CounterMetricFamily

    if not labels:
        return CounterMetricFamily(name, doc, value=float(values))  # type: ignore[arg-type]
    fam = CounterMetricFamily(name, doc, labels=list(labels))
    for key, v in values.items():  # type: ignore[union-attr]
        fam.add_metric(list(key), float(v))
    return fam


def gauge(
    name: str, doc: str, values: dict[tuple[str, ...], float] | float, labels: Sequence[str] = ()
) -> Family:
    from prometheus_client.core import GaugeMetricFamily

    if not labels:
        return GaugeMetricFamily(name, doc, value=float(values))  # type: ignore[arg-type]
    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    for key, v in values.items():  # type: ignore[union-attr]
        fam.add_metric(list(key), float(v))
    return fam


def histogram(name: str, doc: str, hist: Histogram) -> Family:
    from prometheus_client.core import HistogramMetricFamily

    return HistogramMetricFamily(name, doc, buckets=hist.buckets(), sum_value=hist.sum)


class _Families:
    """A prometheus_client collector yielding what a function returns."""

    def __init__(self, collect: Collect) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Family]:
        return self._collect()


def exposition(collect: Collect) -> tuple[bytes, str]:
    """(body, content type) of the text exposition of ``collect()``'s families."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(collect))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def metrics_handler(
    collect: Collect, refresh: Callable[[], Awaitable[None]] | None = None
) -> Callable[[Any], Awaitable[Any]]:
    """An aiohttp handler answering with the exposition; ``refresh()`` runs first (to read
    figures that live off the event loop)."""
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        if refresh is not None:
            await refresh()
        body, ctype = exposition(collect)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = ctype
        return resp

    return handler


class MetricsServer:
    """``GET /metrics`` (and nothing else) over HTTP on the running event loop."""

    def __init__(
        self, collect: Collect, refresh: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        require()
        from aiohttp import web

        self.app = web.Application()
        self.app.router.add_get("/metrics", metrics_handler(collect, refresh))
        self._runner: web.AppRunner | None = None
        self.host = DEFAULT_HOST
        self.port = 0

    async def start(self, listen: str) -> int:
        """Listen on ``listen`` (see :func:`parse_listen`); the bound port."""
        from aiohttp import web

        self.host, port = parse_listen(listen)
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port)
        await site.start()
        self.port = bound_port(self._runner, port)
        log.info("metrics on %smetrics", url(self.host, self.port))
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def bound_port(runner: Any, asked: int) -> int:
    """The port an aiohttp runner's site is bound to (``asked`` unless it was 0)."""
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return asked
