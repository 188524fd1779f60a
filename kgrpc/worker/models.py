"""The worker's model cache: ``<dir>/<name>.onnx`` (and ``<name>.fp16.onnx``,
``<name>.int8.onnx``: a model's file in another precision, kgrpc/precision.py), downloaded from
the coordinator in chunks, resumed after an interruption (``<file>.part`` keeps the bytes so
far) and checked against the sha256 the coordinator announces for that file before it is used.

:meth:`ModelCache.ensure_precision` is what the in-process engine uses: the file of the
precision the worker is set to (``auto``: its device's), or, when the model has no such file,
its fp32 file (every model has one), said once in the log."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from pathlib import Path

import grpc

from kgrpc.digest import file_digest
from kgrpc.precision import (
    FP32,
    PRECISIONS,
    base_path,
    choose_precision,
    from_proto,
    pick_file,
    to_proto,
    variant_file_name,
)
from kgrpc.protocol import is_precision_absent
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.worker.models")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class ModelDownloadError(RuntimeError):
    pass


class PrecisionAbsent(ModelDownloadError):
    """The model has no file in the precision asked for."""


class ModelCache:
    def __init__(self, directory: str | os.PathLike[str], keep: int = 4) -> None:
        # A volunteer's worker runs for weeks and a release comes every hour or so: only the
        # `keep` newest models stay on disk (0 = keep all), with all their files. A pruned one
        # that is needed again (an old reference model in a gating match) is downloaded again.
        self.keep = keep
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._verified: dict[str, str] = {}  # file name -> sha256 checked this run
        self._locks: dict[str, asyncio.Lock] = {}
        self._fell_back: set[tuple[str, str]] = set()  # (model, precision) said in the log
        self.downloads = 0
        self.resumed_bytes = 0

    def path(self, name: str, precision: str = FP32) -> Path:
        if not _SAFE_NAME.match(name):
            raise ModelDownloadError(f"model name {name!r} is not usable as a file name")
        return self.dir / variant_file_name(name, precision)

    def has(self, name: str, precision: str = FP32) -> bool:
        path = self.path(name, precision)
        return path.name in self._verified and path.exists()

    async def ensure_precision(
        self,
        stub: coordinator_pb2_grpc.CoordinatorStub,
        name: str,
        requested: str,
        *,
        on_cuda: bool,
        info: common_pb2.ModelInfo | None = None,
        timeout_s: float = 600.0,
    ) -> tuple[Path, str]:
        """(local file, its precision) of model ``name`` in ``requested`` (auto|fp32|fp16|int8;
        auto: :func:`kgrpc.precision.choose_precision`), or its fp32 file when the model has no
        file in that precision (one log line per model). ``info`` (a release's ModelInfo) says
        which files the model has and their sha256; without it the coordinator is asked for the
        file and says when it is absent."""
        preferred = choose_precision(requested, on_cuda=on_cuda, available=PRECISIONS)
        if info is not None and info.name == name and info.files:
            available = [from_proto(f.precision) for f in info.files]
            precision, _ = pick_file(requested, on_cuda=on_cuda, available=available)
            sha = {from_proto(f.precision): f.sha256 for f in info.files}
            if precision != preferred:
                self._say_fallback(
                    name,
                    requested,
                    f"no {preferred} file (it has {', '.join(available)}): using {precision}",
                )
            return await self.ensure(stub, name, sha[precision], precision=precision), precision
        precision = preferred
        try:
            return await self.ensure(stub, name, precision=precision), precision
        except PrecisionAbsent as exc:
            self._say_fallback(name, requested, f"{exc}: using {FP32}")
        return await self.ensure(stub, name, precision=FP32), FP32

    def _say_fallback(self, name: str, requested: str, note: str) -> None:
        if (name, requested) not in self._fell_back:
            self._fell_back.add((name, requested))
            log.info("model %s: %s", name, note)

    async def ensure(
        self,
        stub: coordinator_pb2_grpc.CoordinatorStub,
        name: str,
        sha256: str = "",
        *,
        precision: str = FP32,
        timeout_s: float = 600.0,
    ) -> Path:
        """The verified local file of model ``name`` in ``precision``, downloading (or
        resuming) as needed. PrecisionAbsent when the model has no file in ``precision``."""
        final = self.path(name, precision)
        lock = self._locks.setdefault(final.name, asyncio.Lock())
        async with lock:
            known = self._verified.get(final.name)
            if known is not None and final.exists() and (not sha256 or known == sha256):
                return final
            if final.exists() and not sha256:
                # Cached by an earlier run: ask for the announced sha256 (a download from the
                # end of the file carries only the file's description) instead of fetching it
                # again.
                sha256 = await self._announced_sha256(stub, name, precision, final.stat().st_size)
            if final.exists() and sha256:
                digest = (await asyncio.to_thread(file_digest, final)).sha256
                if digest == sha256:
                    self._verified[final.name] = digest
                    return final
                log.warning(
                    "cached %s has sha256 %s, expected %s: downloading again",
                    final.name,
                    digest[:12],
                    sha256[:12],
                )
                final.unlink()
            await self._download(stub, name, precision, sha256, timeout_s)
            return final

    @staticmethod
    def _request(name: str, precision: str, offset: int) -> coordinator_pb2.DownloadModelRequest:
        return coordinator_pb2.DownloadModelRequest(
            name=name, offset=offset, precision=to_proto(precision)
        )

    @staticmethod
    def _file_of(chunk: coordinator_pb2.ModelChunk, name: str, precision: str) -> tuple[str, int]:
        """(sha256, size) of the file a download's first chunk announces. A coordinator that
        predates precisions sends no ``file`` and always the fp32 file: for another precision
        that is PrecisionAbsent."""
        if chunk.HasField("file"):
            if from_proto(chunk.file.precision) != precision:
                raise ModelDownloadError(
                    f"{name}: asked for the {precision} file, the coordinator sends "
                    f"{from_proto(chunk.file.precision)}"
                )
            return chunk.file.sha256, chunk.file.size_bytes
        if precision != FP32:
            raise PrecisionAbsent(f"the coordinator has no {precision} files")
        return chunk.info.sha256, chunk.info.size_bytes

    @classmethod
    async def _announced_sha256(
        cls, stub: coordinator_pb2_grpc.CoordinatorStub, name: str, precision: str, offset: int
    ) -> str:
        call = stub.DownloadModel(cls._request(name, precision, offset), timeout=30)
        try:
            async for chunk in call:
                if chunk.HasField("info"):
                    return cls._file_of(chunk, name, precision)[0]
        except grpc.aio.AioRpcError as exc:
            _raise_absent(exc, name, precision)
            if exc.code() != grpc.StatusCode.OUT_OF_RANGE:  # a longer file: download it anew
                raise
        finally:
            call.cancel()
        return ""

    async def _download(
        self,
        stub: coordinator_pb2_grpc.CoordinatorStub,
        name: str,
        precision: str,
        sha256: str,
        timeout_s: float,
    ) -> None:
        final = self.path(name, precision)
        part = final.with_name(final.name + ".part")
        offset = part.stat().st_size if part.exists() else 0
        if offset:
            log.info("resuming download of %s at byte %d", final.name, offset)
            self.resumed_bytes += offset
        expected_sha, expected_size = sha256, -1
        call = stub.DownloadModel(self._request(name, precision, offset), timeout=timeout_s)
        try:
            with open(part, "ab") as f:
                async for chunk in call:
                    if chunk.HasField("info"):
                        announced, expected_size = self._file_of(chunk, name, precision)
                        if announced:
                            if expected_sha and announced != expected_sha:
                                raise ModelDownloadError(
                                    f"{final.name}: coordinator sends sha256 {announced}, "
                                    f"release said {expected_sha}"
                                )
                            expected_sha = announced
                    if chunk.data:
                        if chunk.offset != f.tell():
                            raise ModelDownloadError(
                                f"{final.name}: chunk at offset {chunk.offset}, expected {f.tell()}"
                            )
                        f.write(chunk.data)
                f.flush()
                os.fsync(f.fileno())
        except grpc.aio.AioRpcError as exc:
            _raise_absent(exc, name, precision)
            raise
        except PrecisionAbsent:
            call.cancel()
            part.unlink(missing_ok=True)
            raise
        size = part.stat().st_size
        if expected_size >= 0 and size != expected_size:
            if size > expected_size:
                part.unlink()
            raise ModelDownloadError(f"{final.name}: got {size} bytes, expected {expected_size}")
        digest = (await asyncio.to_thread(file_digest, part)).sha256
        if expected_sha and digest != expected_sha:
            part.unlink()  # a corrupt prefix would be resumed forever: start over next time
            raise ModelDownloadError(f"{final.name}: sha256 {digest} does not match {expected_sha}")
        os.replace(part, final)
        self._verified[final.name] = digest
        self.downloads += 1
        self.prune(protect=name)
        log.info("downloaded model %s %s (%d bytes, sha256 %s)", name, precision, size, digest[:12])

    def prune(self, protect: str = "") -> list[str]:
        """Delete all files but those of the ``keep`` most recently downloaded models (never
        model ``protect``'s); the names of the models removed.

        An engine that already loaded a deleted file keeps working: the session holds its own
        copy of the weights.
        """
        if self.keep <= 0:
            return []
        by_model: dict[str, list[Path]] = {}
        for path in self.dir.glob("*.onnx"):
            by_model.setdefault(base_path(path).name[: -len(".onnx")], []).append(path)

        def newest(name: str) -> float:
            return max(p.stat().st_mtime for p in by_model[name])

        order = sorted(by_model, key=newest, reverse=True)
        removed = []
        for name in order[self.keep :]:
            if name == protect:
                continue
            for path in by_model[name]:
                path.unlink(missing_ok=True)
                self._verified.pop(path.name, None)
            removed.append(name)
        if removed:
            log.info(
                "model cache: removed %s (keeping the %d newest)", ", ".join(removed), self.keep
            )
        return removed


def _raise_absent(exc: grpc.aio.AioRpcError, name: str, precision: str) -> None:
    """PrecisionAbsent for the coordinator's "no file in that precision" answer."""
    if is_precision_absent(exc):
        raise PrecisionAbsent(f"model {name} has no {precision} file") from exc
