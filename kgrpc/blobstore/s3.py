"""The S3 backend: any S3-API object store (AWS S3, SeaweedFS, MinIO, Ceph RGW, R2 ...)
through obstore (docs/operations.md, "Object store", says why that client).

An S3 PUT is atomic by the protocol (a reader sees the old object or the new one); a
create-only put is a conditional PUT (``If-None-Match: *``), so a replayed upload cannot
replace a different object. Errors are mapped to :mod:`kgrpc.blobstore.base`'s: anything
that a retry may fix (no connection, a timeout, a 5xx) is :class:`BlobUnavailableError`.
obstore is imported here only, so a worker or a coordinator on the local store never loads it.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgrpc.blobstore.base import (
    BlobExistsError,
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    BlobUnavailableError,
    ObjectInfo,
    bytes_digest,
    check_key,
    check_prefix,
)
from kgrpc.digest import file_digest
from kgrpc.durable import atomic_writer

# How long one call may take before it counts as an outage: a shard cut retries on its next
# flush anyway, so a short bound keeps the storage thread from stalling on a dead endpoint.
CONNECT_TIMEOUT_S = 5
REQUEST_TIMEOUT_S = 300  # a 200 MB shard over a slow link
MAX_RETRIES = 3
RETRY_TIMEOUT_S = 15

# S3 error codes that say the configuration is wrong, not that the store is down.
_CREDENTIALS = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403 Forbidden")
_BUCKET = ("NoSuchBucket",)


@dataclass(frozen=True)
class S3Options:
    """Where and as whom: each empty value is taken from the usual AWS variable."""

    endpoint: str = ""  # AWS_ENDPOINT_URL (AWS_ENDPOINT_URL_S3 first); empty = AWS itself
    region: str = ""  # AWS_REGION, AWS_DEFAULT_REGION; default us-east-1
    access_key_id: str = ""  # AWS_ACCESS_KEY_ID
    secret_access_key: str = ""  # AWS_SECRET_ACCESS_KEY
    session_token: str = ""  # AWS_SESSION_TOKEN
    allow_http: bool | None = None  # AWS_ALLOW_HTTP; an http:// endpoint allows it too

    def resolved(self, env: os._Environ[str] | dict[str, str] | None = None) -> S3Options:
        e = os.environ if env is None else env

        def pick(value: str, *names: str) -> str:
            if value:
                return value
            for n in names:
                if e.get(n):
                    return e[n]
            return ""

        endpoint = pick(self.endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        allow = self.allow_http
        if allow is None:
            flag = e.get("AWS_ALLOW_HTTP", "").strip().lower()
            allow = flag in ("1", "true", "yes", "on") or endpoint.startswith("http://")
        return S3Options(
            endpoint=endpoint,
            region=pick(self.region, "AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1",
            access_key_id=pick(self.access_key_id, "AWS_ACCESS_KEY_ID"),
            secret_access_key=pick(self.secret_access_key, "AWS_SECRET_ACCESS_KEY"),
            session_token=pick(self.session_token, "AWS_SESSION_TOKEN"),
            allow_http=allow,
        )


def _classify(exc: Exception, what: str) -> BlobStoreError:
    """The blob store error for an obstore error raised while doing ``what``."""
    from obstore import exceptions as ox

    text = str(exc)
    first = text.split("\n", 1)[0].strip()
    missing_bucket = any(c in text for c in _BUCKET)
    if isinstance(exc, ox.NotFoundError | FileNotFoundError) and not missing_bucket:
        # obstore raises the builtin FileNotFoundError for a missing object.
        return BlobNotFoundError(f"{what}: not found")
    if missing_bucket:
        return BlobStoreError(f"{what}: the bucket does not exist")
    if isinstance(exc, ox.PermissionDeniedError | ox.UnauthenticatedError) or any(
        c in text for c in _CREDENTIALS
    ):
        return BlobStoreError(
            f"{what}: the store refused the credentials (AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY or the store_* settings)"
        )
    if isinstance(exc, ox.InvalidPathError | ox.UnknownConfigurationKeyError):
        return BlobStoreError(f"{what}: {first}")
    if "error sending request" in text or "timed out" in text.lower():
        return BlobUnavailableError(f"{what}: the store cannot be reached ({_reason(text)})")
    return BlobUnavailableError(f"{what}: {first[:300]}")


def _reason(text: str) -> str:
    for hint in ("Connection refused", "connection refused", "dns error", "timed out"):
        if hint in text:
            return hint.lower()
    return "no answer"


class S3BlobStore(BlobStore):
    def __init__(self, bucket: str, prefix: str = "", options: S3Options | None = None) -> None:
        from obstore.store import S3Store

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        opts = (options or S3Options()).resolved()
        self.options = opts
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        if opts.endpoint:
            self.url += f" at {opts.endpoint}"
        config: dict[str, Any] = {"region": opts.region}
        if opts.endpoint:
            config["endpoint"] = opts.endpoint
        if opts.access_key_id:
            config["access_key_id"] = opts.access_key_id
            config["secret_access_key"] = opts.secret_access_key
        if opts.session_token:
            config["session_token"] = opts.session_token
        self._store = S3Store(
            bucket,
            prefix=self.prefix or None,
            config=config,
            client_options={
                "allow_http": bool(opts.allow_http),
                "connect_timeout": datetime.timedelta(seconds=CONNECT_TIMEOUT_S),
                "timeout": datetime.timedelta(seconds=REQUEST_TIMEOUT_S),
            },
            retry_config={
                "max_retries": MAX_RETRIES,
                "retry_timeout": datetime.timedelta(seconds=RETRY_TIMEOUT_S),
            },
        )

    def _what(self, op: str, key: str) -> str:
        return f"store {self.url}: {op} {key!r}"

    # ------------------------------------------------------------------ writes
    def _put(self, key: str, payload: Any, create_only: bool, same: Any) -> ObjectInfo:
        import obstore
        from obstore import exceptions as ox

        check_key(key)
        try:
            obstore.put(self._store, key, payload, mode="create" if create_only else "overwrite")
        except (ox.AlreadyExistsError, ox.PreconditionError):
            if not same():
                raise BlobExistsError(
                    f"{self._what('put', key)}: exists with different content (create-only)"
                ) from None
        except (ox.BaseError, FileNotFoundError) as exc:
            raise _classify(exc, self._what("put", key)) from None
        info = self.stat(key)
        if info is None:
            raise BlobUnavailableError(f"{self._what('put', key)}: not there after the put")
        return info

    def put_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> ObjectInfo:
        def same() -> bool:
            return bytes_digest(self.get_bytes(key)) == bytes_digest(data)

        return self._put(key, data, create_only, same)

    def put_file(
        self, key: str, path: str | os.PathLike[str], *, create_only: bool = False
    ) -> ObjectInfo:
        src = Path(path)
        if not src.is_file():
            raise BlobNotFoundError(f"no file {src} to store")

        def same() -> bool:
            digest = file_digest(src)
            info = self.stat(key)
            if info is None or info.size != digest.size:
                return False
            return bytes_digest(self.get_bytes(key)) == digest.sha256

        return self._put(key, src, create_only, same)

    def delete(self, key: str) -> None:
        import obstore
        from obstore import exceptions as ox

        check_key(key)
        try:
            obstore.delete(self._store, key)
        except (ox.NotFoundError, FileNotFoundError):
            return
        except ox.BaseError as exc:
            raise _classify(exc, self._what("delete", key)) from None

    # ------------------------------------------------------------------ reads
    def get_bytes(self, key: str) -> bytes:
        import obstore
        from obstore import exceptions as ox

        check_key(key)
        try:
            return bytes(obstore.get(self._store, key).bytes())
        except (ox.BaseError, FileNotFoundError) as exc:
            raise _classify(exc, self._what("get", key)) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        import obstore
        from obstore import exceptions as ox

        check_key(key)
        if offset < 0 or length < 0:
            raise ValueError(f"bad range: offset {offset}, length {length}")
        if length == 0:
            return b""
        try:
            return bytes(obstore.get_range(self._store, key, start=offset, length=length))
        except (ox.BaseError, FileNotFoundError) as exc:
            error = _classify(exc, self._what("get", key))
            if isinstance(error, BlobUnavailableError):
                # A range starting at or past the end is an error in S3 (416): b"" here.
                info = self.stat(key)
                if info is not None and offset >= info.size:
                    return b""
            raise error from None

    def download(self, key: str, path: str | os.PathLike[str]) -> ObjectInfo:
        import obstore
        from obstore import exceptions as ox

        check_key(key)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            result = obstore.get(self._store, key)
            with atomic_writer(target) as f:
                for chunk in result.stream(min_chunk_size=1 << 20):
                    f.write(chunk)
        except (ox.BaseError, FileNotFoundError) as exc:
            raise _classify(exc, self._what("get", key)) from None
        return ObjectInfo(key, target.stat().st_size)

    def stat(self, key: str) -> ObjectInfo | None:
        import obstore
        from obstore import exceptions as ox

        check_key(key)
        try:
            meta = obstore.head(self._store, key)
        except (ox.NotFoundError, FileNotFoundError) as exc:
            if any(c in str(exc) for c in _BUCKET):
                raise _classify(exc, self._what("head", key)) from None
            return None
        except ox.BaseError as exc:
            raise _classify(exc, self._what("head", key)) from None
        return ObjectInfo(key, int(meta["size"]))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        import obstore
        from obstore import exceptions as ox

        check_prefix(prefix)
        # obstore lists whole path segments: ask for the prefix's directory, filter the rest.
        head = prefix.rpartition("/")[0]
        found: list[ObjectInfo] = []
        try:
            for chunk in obstore.list(self._store, prefix=head or None):
                for meta in chunk:
                    if meta["path"].startswith(prefix):
                        found.append(ObjectInfo(meta["path"], int(meta["size"])))
        except (ox.BaseError, FileNotFoundError) as exc:
            raise _classify(exc, f"store {self.url}: list {prefix!r}") from None
        found.sort(key=lambda o: o.key)
        return iter(found)

    def check(self) -> None:
        import obstore
        from obstore import exceptions as ox

        try:
            # One LIST request: needs the address, the credentials and the bucket all right.
            next(iter(obstore.list(self._store, prefix="kgrpc-store-check", chunk_size=1)), None)
        except (ox.BaseError, FileNotFoundError) as exc:
            raise _classify(exc, f"store {self.url}") from None
