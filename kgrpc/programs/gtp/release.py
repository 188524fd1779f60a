"""``kgrpc-gtp --coordinator ADDR[,ADDR]``: a run's newest released model, fetched once at start.

The coordinator (any replica: :func:`kgrpc.net.channel.make_channel` balances a list) names
its current release (GetLatestModel); the file is downloaded as workers download theirs
(:class:`kgrpc.worker.models.ModelCache`: resumed, sha256-checked, renamed into place only when
whole) into ``--model-dir`` and then played as ``--model FILE`` would be. A later release is not
taken during the session: the player keeps the model it started with.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc

from kgrpc.net import describe, make_channel
from kgrpc.net.channel import split_addresses
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.models import ModelCache, ModelDownloadError

CALL_TIMEOUT_S = 30.0
DOWNLOAD_TIMEOUT_S = 600.0
KEEP_MODELS = 4  # a player's cache keeps the newest few releases, as a worker's does


class ReleaseUnavailable(RuntimeError):
    """No model to play from the coordinator (the one-line reason)."""


def default_model_dir() -> Path:
    """``$XDG_CACHE_HOME/kgrpc/models``, else ``~/.cache/kgrpc/models`` (the XDG default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kgrpc" / "models"


async def fetch_release(
    address: str, token: str | None, tls_ca: str | None, model_dir: str | os.PathLike[str]
) -> tuple[str, Path]:
    """(name, local file) of the coordinator's current release, downloaded if needed;
    ReleaseUnavailable when there is none or the coordinator cannot be reached or refuses."""
    try:
        split_addresses(address)  # a typo says so, instead of a failed name lookup
        channel = make_channel(address, token=token, tls_ca=tls_ca)
    except ValueError as exc:  # an address that is not HOST:PORT, an unreadable CA
        raise ReleaseUnavailable(str(exc)) from None
    try:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        try:
            latest = await stub.GetLatestModel(
                coordinator_pb2.GetLatestModelRequest(), timeout=CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            raise ReleaseUnavailable(f"coordinator {address}: {describe(exc)}") from None
        if not latest.found:
            raise ReleaseUnavailable(f"the coordinator at {address} has released no model yet")
        info = latest.model
        cache = ModelCache(model_dir, keep=KEEP_MODELS)
        try:
            path = await cache.ensure(stub, info.name, info.sha256, timeout_s=DOWNLOAD_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise ReleaseUnavailable(
                f"coordinator {address}: downloading {info.name}: {describe(exc)}"
            ) from None
        except (ModelDownloadError, OSError) as exc:
            raise ReleaseUnavailable(f"downloading {info.name}: {exc}") from None
        return info.name, path
    finally:
        await channel.close()
