"""Follow the coordinator's model releases (``kgrpc-inference --coordinator ADDR --token T``).

The channel is :func:`kgrpc.net.make_channel`'s: plaintext, or TLS with
``--tls-ca PEM`` (``--coordinator-tls-ca``; the token then rides on call credentials).

``WatchModels`` (server stream) announces each released model; the file comes from
``DownloadModel`` chunks, is checked against the announced sha256 and size, and is stored
atomically as ``<model_dir>/<name>.onnx`` (``<name>.int8.onnx`` ... for another precision; so
an existing file is a verified one and is not downloaded again). The file downloaded is the
one of the precision the server serves (``--precision``; auto:
:func:`kgrpc.precision.choose_precision` for the engine's device), or the fp32 file when the
model has no such file (one log line per model). Each release is loaded beside the current
model and becomes the default; the previous one is unloaded once idle. ``fetch(name)`` is also
the registry's on-demand fetcher for a request naming a published model that is not loaded (a
gating match).

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
from kgrpc.precision import (
    FP32,
    PRECISIONS,
    choose_precision,
    from_proto,
    info_precisions,
    pick_file,
    precision_of_path,
    to_proto,
    variant_file_name,
)
from kgrpc.protocol import is_precision_absent
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.inference.follow")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _retryable(exc: BaseException) -> bool:
    # Every failure of the stream or of a download is waited out (a coordinator restarting, a
    # network gone, a token being replaced; a surprise must not end the following either);
    # only a channel being closed (CANCELLED) ends it.
    return isinstance(exc, Exception) and not (
        isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.CANCELLED
    )


class _Absent(Exception):
    """The model has no file in the precision asked for."""


def _announced(
    chunk: coordinator_pb2.ModelChunk, name: str, precision: str
) -> common_pb2.ModelFile:
    """The file a download's first chunk announces. A coordinator older than precisions sends
    no ``file``, and always the fp32 file: for another precision that is _Absent."""
    if chunk.HasField("file"):
        if from_proto(chunk.file.precision) != precision:
            raise OSError(f"model {name}: asked for {precision}, got another precision's file")
        return chunk.file
    if precision != FP32:
        raise _Absent(name)
    return common_pb2.ModelFile(
        precision=to_proto(FP32), size_bytes=chunk.info.size_bytes, sha256=chunk.info.sha256
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
        self._on_cuda: bool | None = None
        self._fell_back: set[str] = set()  # models whose fp32 fallback was logged

    @property
    def stub(self) -> coordinator_pb2_grpc.CoordinatorStub:
        if self._channel is None:
            # The shared client channel: TLS when a CA is given, the token attached to every
            # call (call credentials on TLS, interceptors on plaintext), 64 MiB messages and
            # keepalive, which also keeps the long WatchModels stream alive through NATs.
            self._channel = make_channel(self.address, token=self.token, tls_ca=self.tls_ca)
        return coordinator_pb2_grpc.CoordinatorStub(self._channel)

    @property
    def on_cuda(self) -> bool:
        """Whether the registry's engines expect CUDA (``auto`` then serves fp16)."""
        if self._on_cuda is None:
            from inference.engine import cuda_expected

            self._on_cuda = cuda_expected(self.registry.device)
        return self._on_cuda

    def _fallback(self, name: str, note: str) -> None:
        if name not in self._fell_back:
            self._fell_back.add(name)
            log.info("model %s: %s", name, note)

    async def fetch(self, name: str, info: common_pb2.ModelInfo | None = None) -> str:
        """Local path of model ``name``'s file in the precision served, downloading it first
        if needed; ``info`` (its release) lists the files it has, else the coordinator is
        asked. Raises KeyError when the coordinator does not know the model."""
        if not _SAFE_NAME.match(name):
            raise KeyError(name)
        requested = self.registry.precision
        preferred = choose_precision(requested, on_cuda=self.on_cuda, available=PRECISIONS)
        precision = preferred
        if info is not None and info.name == name:
            available = info_precisions(info)
            precision, _ = pick_file(requested, on_cuda=self.on_cuda, available=available)
            if precision != preferred:
                self._fallback(
                    name, f"no {preferred} file (it has {', '.join(available)}): using {precision}"
                )
        try:
            return await self._fetch_file(name, precision)
        except _Absent:
            self._fallback(name, f"no {precision} file: using {FP32}")
        return await self._fetch_file(name, FP32)

    async def _fetch_file(self, name: str, precision: str) -> str:
        path = self.model_dir / variant_file_name(name, precision)
        lock = self._locks.setdefault(path.name, asyncio.Lock())
        async with lock:
            if path.is_file():
                return str(path)
            try:
                await self._download(name, precision, path)
            except grpc.aio.AioRpcError as exc:
                if is_precision_absent(exc) and precision != FP32:
                    raise _Absent(name) from exc
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    raise KeyError(name) from exc
                raise
        return str(path)

    async def _download(self, name: str, precision: str, path: Path) -> None:
        self.model_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=self.model_dir)
        digest = hashlib.sha256()
        size = 0
        file = None
        try:
            with os.fdopen(fd, "wb") as f:
                call = self.stub.DownloadModel(
                    coordinator_pb2.DownloadModelRequest(
                        name=name, offset=0, precision=to_proto(precision)
                    )
                )
                async for chunk in call:
                    if chunk.HasField("info"):
                        file = _announced(chunk, name, precision)
                    if chunk.offset != size:
                        raise OSError(
                            f"model {name}: chunk at offset {chunk.offset}, expected {size}"
                        )
                    f.write(chunk.data)
                    digest.update(chunk.data)
                    size += len(chunk.data)
                f.flush()
                os.fsync(f.fileno())
            if file is None:
                raise OSError(f"model {name}: download carried no model info")
            if size != file.size_bytes or digest.hexdigest() != file.sha256:
                raise OSError(
                    f"model {name} {precision}: got {size} bytes sha256 {digest.hexdigest()}, "
                    f"announced {file.size_bytes} bytes sha256 {file.sha256}"
                )
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        log.info("downloaded model %s %s (%d bytes) to %s", name, precision, size, path)

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
                await self._take(release.model)

        while True:
            await retry(
                follow,
                backoff=backoff,
                retryable=_retryable,
                outage=self.outage,
                what="following releases",
            )
            await asyncio.sleep(backoff.next_delay())  # the stream ended: open it again

    async def _take(self, info: common_pb2.ModelInfo) -> None:
        """Make release ``info`` the default model; a download failure propagates (retried
        with the stream), a load failure is logged once and the release skipped."""
        name = info.name
        if name in self._unloadable:
            return
        if name == self.registry.default:
            await self._take_better_file(info)
            return
        path = await self.fetch(name, info)
        try:
            await self.registry.load(
                path, make_default=True, retire_previous=True, precision=precision_of_path(path)
            )
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
        log.info("following release %s (%s)", name, precision_of_path(path))

    async def _take_better_file(self, info: common_pb2.ModelInfo) -> None:
        """The release served, announced again with more files (the trainer sends fp32 first,
        int8 after the release): serve the one that suits the engine better, when there is
        one; a load failure is logged and the loaded file kept."""
        loaded = self.registry.models.get(info.name)
        want, _ = pick_file(
            self.registry.precision, on_cuda=self.on_cuda, available=info_precisions(info)
        )
        if loaded is None or loaded.engine.precision == want:
            return
        path = await self.fetch(info.name, info)
        try:
            await self.registry.swap(path, precision_of_path(path))
        except Exception as exc:
            log.error(
                "release %s: its %s file cannot be loaded (%s: %s); keeping the %s file",
                info.name,
                precision_of_path(path),
                type(exc).__name__,
                exc,
                loaded.engine.precision,
            )
            return
        log.info("release %s: now serving its %s file", info.name, precision_of_path(path))

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
