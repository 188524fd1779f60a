"""Follow the coordinator's model releases (``kgrpc-inference --coordinator ADDR --token T``).

The channel is :func:`kgrpc.net.make_channel`'s: plaintext, or TLS with
``--tls-ca PEM`` (``--coordinator-tls-ca``; the token then rides on call credentials).

``WatchModels`` (server stream) announces each released model; the file comes from
``DownloadModel`` chunks, is checked against the announced sha256 and size, and is stored
atomically as ``<model_dir>/<name>.onnx`` (so an existing file is a verified one and is not
downloaded again). Each release is loaded beside the current model and becomes the default;
the previous one is unloaded once idle. ``fetch(name)`` is also the registry's on-demand
fetcher for a request naming a published model that is not loaded (a gating match).

Outages: the stream is opened again with growing, jittered waits (:func:`kgrpc.net.retry`,
the project's one retry loop); the log says once that the coordinator is down, with what to do
when it disagrees with us about TLS, and once that it is back. A release that downloads but
cannot be loaded (a file ONNX Runtime cannot run here) is logged once and skipped: the server
keeps its model and takes the next release.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path

import grpc

from inference.models import ModelRegistry
from kgrpc.net import Backoff, Outage, make_channel, retry
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.inference.follow")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _retryable(exc: BaseException) -> bool:
    # Every failure of the stream or of a download is waited out (a coordinator restarting, a
    # network gone, a token being replaced; a surprise must not end the following either);
    # only a channel being closed (CANCELLED) ends it.
    return isinstance(exc, Exception) and not (
        isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.CANCELLED
    )


class CoordinatorFollower:
    def __init__(
        self,
        address: str,
        token: str | None,
        model_dir: str | os.PathLike[str],
        registry: ModelRegistry,
        *,
        retry_s: float = 1.0,
        max_retry_s: float = 30.0,
        tls_ca: str | bytes | os.PathLike[str] | None = None,
    ) -> None:
        self.address = address
        self.token = token
        # CA (or self-signed coordinator certificate, PEM path or bytes): makes the channel TLS.
        self.tls_ca = tls_ca
        self.model_dir = Path(model_dir)
        self.registry = registry
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._channel: grpc.aio.Channel | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self.releases_loaded = 0
        self.outage = Outage(
            f"coordinator {address}", logger=log, meanwhile="serving the models loaded"
        )
        self._unloadable: set[str] = set()  # releases that failed to load: skipped

    @property
    def stub(self) -> coordinator_pb2_grpc.CoordinatorStub:
        if self._channel is None:
            # The shared client channel: TLS when a CA is given, the token attached to every
            # call (call credentials on TLS, interceptors on plaintext), 64 MiB messages and
            # keepalive, which also keeps the long WatchModels stream alive through NATs.
            self._channel = make_channel(self.address, token=self.token, tls_ca=self.tls_ca)
        return coordinator_pb2_grpc.CoordinatorStub(self._channel)

    async def fetch(self, name: str) -> str:
        """Local path of model ``name``, downloading it first if needed.

        Raises KeyError when the coordinator does not know the model.
        """
        if not _SAFE_NAME.match(name):
            raise KeyError(name)
        path = self.model_dir / f"{name}.onnx"
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if path.is_file():
                return str(path)
            try:
                await self._download(name, path)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    raise KeyError(name) from exc
                raise
        return str(path)

    async def _download(self, name: str, path: Path) -> None:
        self.model_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=self.model_dir)
        digest = hashlib.sha256()
        size = 0
        info = None
        try:
            with os.fdopen(fd, "wb") as f:
                call = self.stub.DownloadModel(
                    coordinator_pb2.DownloadModelRequest(name=name, offset=0)
                )
                async for chunk in call:
                    if chunk.HasField("info"):
                        info = chunk.info
                    if chunk.offset != size:
                        raise OSError(
                            f"model {name}: chunk at offset {chunk.offset}, expected {size}"
                        )
                    f.write(chunk.data)
                    digest.update(chunk.data)
                    size += len(chunk.data)
                f.flush()
                os.fsync(f.fileno())
            if info is None:
                raise OSError(f"model {name}: download carried no model info")
            if size != info.size_bytes or digest.hexdigest() != info.sha256:
                raise OSError(
                    f"model {name}: got {size} bytes sha256 {digest.hexdigest()}, "
                    f"announced {info.size_bytes} bytes sha256 {info.sha256}"
                )
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        log.info("downloaded model %s (%d bytes) to %s", name, size, path)

    async def run(self) -> None:
        """Follow releases until cancelled, opening the stream again after an outage (or when
        the coordinator ends it)."""
        backoff = Backoff(base_s=self.retry_s, cap_s=self.max_retry_s)

        async def follow() -> None:
            call = self.stub.WatchModels(
                coordinator_pb2.WatchModelsRequest(known_model=self.registry.default)
            )
            async for release in call:
                self.outage.ok()
                backoff.reset()
                await self._take(release.model.name)

        while True:
            await retry(
                follow,
                backoff=backoff,
                retryable=_retryable,
                outage=self.outage,
                what="following releases",
            )
            await asyncio.sleep(backoff.next_delay())  # the stream ended: open it again

    async def _take(self, name: str) -> None:
        """Make release ``name`` the default model; a download failure propagates (retried
        with the stream), a load failure is logged once and the release skipped."""
        if name == self.registry.default or name in self._unloadable:
            return
        path = await self.fetch(name)
        try:
            await self.registry.load(path, make_default=True, retire_previous=True)
        except Exception as exc:
            self._unloadable.add(name)
            log.error(
                "release %s cannot be loaded (%s: %s); still serving %s",
                name,
                type(exc).__name__,
                exc,
                self.registry.default or "no model",
            )
            return
        self.releases_loaded += 1
        log.info("following release %s", name)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
