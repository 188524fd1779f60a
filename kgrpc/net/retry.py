"""Retrying failed calls: growing, jittered waits, which errors are worth another try and
which end the program, and one log line per outage instead of one per try.

Waits. The wait before attempt ``k`` (0-based, after the first failure) is
``min(cap, base * factor**k)`` scaled by a random factor in ``[1 - jitter, 1]``
("full-ish" jitter), so that many workers that lost the coordinator at the same
moment do not come back in lock-step (:class:`Backoff`).

Errors, by their gRPC status (:func:`status_code` reads it from a ``grpc.aio.AioRpcError`` or
from an error that relays a status by name, such as ``kgrpc.evaluator.EvaluationError``):

* fatal (:data:`FATAL_CODES`: UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED): a bad or
  revoked token, the wrong server. Retrying cannot help; :func:`retry` raises
  :class:`FatalError` for them when asked to (``fatal=is_fatal``).
* transient (:data:`RETRYABLE_CODES`): trying again later can succeed. The default set of
  :func:`retry`; a caller may retry more (the worker retries every status that is not fatal,
  since the coordinator can come back with a different answer).
* NOT_FOUND is neither: the caller decides what it means (:func:`is_not_found`). The worker
  registers again when the coordinator forgot it, and gives up a task whose model nobody has.

A client and a server that disagree about TLS fail with UNAVAILABLE like a server that is down;
:func:`describe` recognises them (:mod:`kgrpc.net.handshake`) and says what to do instead of
"Socket closed", so the outage's one log line carries the hint; :func:`is_tls_mismatch` lets a
caller stop retrying them (the worker does at its first ``Register``).

Outages. :class:`Outage` logs once that a service went down and once that it is back;
:func:`retry` reports each failed try and each success to it.

The one retry loop is :func:`retry`. :class:`RetryPolicy` binds the settings the calls to one
service share (waits, outage, stop event, which errors are retried or fatal), so that each call
site names only what differs::

    coordinator = RetryPolicy(Outage("coordinator host:port"), stop=stopping,
                              retryable=is_rpc_error, fatal=is_fatal)
    resp = await coordinator.call(lambda: stub.Register(req, timeout=10), what="Register")
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from kgrpc.net.handshake import last_error, status_and_details, tls_mismatch

log = logging.getLogger(__name__)
T = TypeVar("T")

# Codes where trying again later can succeed. INVALID_ARGUMENT, PERMISSION_DENIED
# and the like will fail the same way every time.
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)

# Codes no retry can change: the caller's credentials or the server itself are wrong.
FATAL_CODES = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


class FatalError(RuntimeError):
    """Retrying cannot help (bad token, wrong server)."""


def status_code(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC status ``exc`` carries: an ``AioRpcError``'s code, or the status named by the
    ``code`` string of an error that relays one (``kgrpc.evaluator.EvaluationError``)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code()
    name = getattr(exc, "code", None)
    if isinstance(name, str):
        return grpc.StatusCode.__members__.get(name)
    return None


def is_rpc_error(exc: BaseException) -> bool:
    """A failed gRPC call (any status)."""
    return isinstance(exc, grpc.aio.AioRpcError)


def is_transient(exc: BaseException) -> bool:
    """A status in :data:`RETRYABLE_CODES`."""
    return status_code(exc) in RETRYABLE_CODES


def is_fatal(exc: BaseException) -> bool:
    """A status in :data:`FATAL_CODES`."""
    return status_code(exc) in FATAL_CODES


def is_tls_mismatch(exc: BaseException) -> bool:
    """The client's and the server's TLS settings differ (:func:`describe` says how)."""
    return tls_mismatch(exc) is not None


def is_not_found(exc: BaseException) -> bool:
    return status_code(exc) == grpc.StatusCode.NOT_FOUND


def describe(exc: BaseException) -> str:
    """``CODE: details`` for a gRPC error, ``Type: message`` for anything else; a client and
    server that disagree about TLS get what to do instead
    (:func:`kgrpc.net.handshake.tls_mismatch`: ``closed the connection during the handshake:
    is it serving TLS? pass --tls-ca CA.pem [UNAVAILABLE: Socket closed]``)."""
    hint = tls_mismatch(exc)
    if hint is not None:
        code, text = status_and_details(exc)
        return f"{hint} [{code.name if code else '?'}: {last_error(text)}]"
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Backoff:
    base_s: float = 1.0
    factor: float = 1.5
    cap_s: float = 300.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt; advances the attempt counter."""
        try:
            grown = self.base_s * self.factor**self.attempt
        except OverflowError:
            # factor**attempt leaves the float range after ~1,750 attempts at 1.5 (days of
            # capped waits for a worker retrying forever): it would crash the retry loop
            # instead of waiting cap_s.
            grown = self.cap_s
        raw = min(self.cap_s, grown)
        self.attempt += 1
        return raw * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempt = 0


class Outage:
    """One service as its callers find it: logs once that it went down (at the first failure)
    and once that it is back (at the first success after that), whatever the number of tries
    in between. ``meanwhile`` says what goes on during the outage (for the first line; a
    callable is asked when the outage begins, for a caller whose answer changes: a worker with
    no task yet has nothing to play meanwhile)."""

    def __init__(
        self,
        what: str,
        *,
        meanwhile: str | Callable[[], str] = "",
        logger: logging.Logger | None = None,
    ) -> None:
        self.what = what
        self.meanwhile = meanwhile
        self.log = logger or log
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            meanwhile = self.meanwhile() if callable(self.meanwhile) else self.meanwhile
            self.log.warning(
                "%s unreachable (%s); retrying with backoff%s",
                self.what,
                describe(exc),
                f", {meanwhile}" if meanwhile else "",
            )

    def ok(self) -> None:
        if self.since is not None:
            self.log.info(
                "%s reachable again after %.0f s", self.what, time.monotonic() - self.since
            )
            self.since = None

    @property
    def down(self) -> bool:
        return self.since is not None


async def _wait(seconds: float, stop: asyncio.Event | None) -> bool:
    """Sleep ``seconds`` unless ``stop`` is set first; True when it was."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int | None = None,
    backoff: Backoff | Callable[[], Backoff] | None = None,
    retryable: Callable[[BaseException], bool] | None = None,
    fatal: Callable[[BaseException], bool] | None = None,
    outage: Outage | None = None,
    stop: asyncio.Event | None = None,
    give_up: Callable[[], bool] | None = None,
    what: str = "call",
) -> T:
    """Await ``call()`` until it succeeds; retry the errors ``retryable`` accepts.

    After each failure, in this order:

    1. ``fatal(exc)``: :class:`FatalError` ("``what`` refused: ...", or "``what`` failed:
       <hint>" for a TLS mismatch) is raised from ``exc``;
    2. not ``retryable(exc)`` (default :func:`is_transient`): ``exc`` is raised at once (a bug,
       NOT_FOUND, a bad request);
    3. the failure is reported: to ``outage`` (one line when the service goes down), or without
       one as a warning per try;
    4. ``exc`` is raised when the attempts are used up (``attempts=None``: retry for ever),
       ``give_up()`` says so, or ``stop`` is set;
    5. a wait of ``backoff.next_delay()``; when ``stop`` is set meanwhile, ``exc`` is raised
       (the caller sees the stop in its own state).

    A success is reported to ``outage`` (one line when the service is back). ``backoff`` is a
    :class:`Backoff` or a function making one at the first failure (a call that succeeds then
    costs no random draw); default ``Backoff()``.
    """
    is_retryable = retryable or is_transient
    tried = 0
    made = backoff if isinstance(backoff, Backoff) else None
    while True:
        try:
            result = await call()
        except Exception as exc:
            tried += 1
            if fatal is not None and fatal(exc):
                verb = "failed" if is_tls_mismatch(exc) else "refused"
                raise FatalError(f"{what} {verb}: {describe(exc)}") from exc
            if not is_retryable(exc):
                raise
            if outage is not None:
                outage.failed(exc)
            if (
                (attempts is not None and tried >= attempts)
                or (give_up is not None and give_up())
                or (stop is not None and stop.is_set())
            ):
                raise
            if made is None:
                made = backoff() if backoff is not None else Backoff()
            delay = made.next_delay()
            if outage is None:
                log.warning("%s failed (%s); retrying in %.1f s", what, describe(exc), delay)
            if await _wait(delay, stop):
                raise
            continue
        if outage is not None:
            outage.ok()
        return result


@dataclass
class RetryPolicy:
    """How the calls to one service are retried: the settings they share, for :func:`retry`.

    ``rng`` seeds each call's own jitter stream (a seeded worker stays reproducible);
    ``stop`` ends waits early; ``retryable``/``fatal`` classify errors as :func:`retry` says.
    """

    outage: Outage
    base_s: float = 1.0
    cap_s: float = 300.0
    rng: random.Random = field(default_factory=random.Random)
    stop: asyncio.Event | None = None
    retryable: Callable[[BaseException], bool] = is_transient
    fatal: Callable[[BaseException], bool] | None = is_fatal

    def backoff(self) -> Backoff:
        """A fresh :class:`Backoff` with these waits and its own jitter stream."""
        return Backoff(base_s=self.base_s, cap_s=self.cap_s, rng=random.Random(self.rng.random()))

    async def call(self, call: Callable[[], Awaitable[T]], *, what: str, **changes: Any) -> T:
        """:func:`retry` ``call()`` with this policy; keyword arguments of :func:`retry`
        (``attempts``, ``give_up``, ``retryable``, ``stop=None``, ...) change it for this call."""
        settings: dict[str, Any] = dict(
            backoff=self.backoff,
            retryable=self.retryable,
            fatal=self.fatal,
            outage=self.outage,
            stop=self.stop,
        )
        settings.update(changes)
        return await retry(call, what=what, **settings)
