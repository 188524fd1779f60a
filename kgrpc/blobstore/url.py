"""The ``store`` setting: which blob store a program opens, and the startup check.

* empty: the local directory the program already has (the coordinator's DATA_DIR);
* a path, or ``file:///absolute/path``: a local directory;
* ``s3://BUCKET`` or ``s3://BUCKET/PREFIX``: an S3-API store; endpoint, region and
  credentials from :class:`~kgrpc.blobstore.s3.S3Options` (config keys) or the usual AWS
  variables (``AWS_ENDPOINT_URL``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
  ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ALLOW_HTTP``).

:func:`open_checked` is what a program calls at startup: a bad URL, an unreachable
endpoint, refused credentials or a missing bucket become one :class:`BlobStoreError` line
saying which, for the program to print and exit 2 with.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from kgrpc.blobstore.base import BlobStore, BlobStoreError
from kgrpc.blobstore.local import LocalBlobStore
from kgrpc.blobstore.s3 import S3Options

# S3's bucket naming rules (3-63 characters of lower-case letters, digits, dots, hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def is_remote(url: str) -> bool:
    return url.strip().lower().startswith("s3://")


def open_store(
    url: str, default_root: str | os.PathLike[str] | None = None, options: S3Options | None = None
) -> BlobStore:
    """The store ``url`` names (see the module doc); BlobStoreError naming what is wrong
    with the URL. Nothing is contacted yet: :meth:`BlobStore.check` does that."""
    text = url.strip()
    if not text:
        if default_root is None:
            raise BlobStoreError("no store given")
        return LocalBlobStore(default_root)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if not scheme:
        return LocalBlobStore(Path(text).expanduser())
    parts = urlsplit(text)
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise BlobStoreError(f"bad store URL {url!r}: write file:///ABSOLUTE/PATH")
        return LocalBlobStore(parts.path)
    if scheme in ("s3", "s3a"):
        bucket = parts.netloc
        if parts.query or parts.fragment or "@" in bucket:
            raise BlobStoreError(
                f"bad store URL {url!r}: s3://BUCKET/PREFIX takes no credentials, query or "
                "fragment (credentials come from AWS_* variables or the store_* settings)"
            )
        if not _BUCKET.match(bucket):
            raise BlobStoreError(f"bad store URL {url!r}: {bucket!r} is not an S3 bucket name")
        prefix = parts.path.strip("/")
        if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
            raise BlobStoreError(f"bad store URL {url!r}: bad prefix {prefix!r}")
        try:
            import obstore  # noqa: F401
        except ImportError:
            raise BlobStoreError(
                f"store {url!r} needs obstore: pip install 'kgrpc[coordinator]' (or obstore)"
            ) from None
        from kgrpc.blobstore.s3 import S3BlobStore

        return S3BlobStore(bucket, prefix, options)
    raise BlobStoreError(
        f"bad store URL {url!r}: unknown scheme {scheme!r} (a path, file:///PATH or "
        "s3://BUCKET/PREFIX)"
    )


def open_checked(
    url: str, default_root: str | os.PathLike[str] | None = None, options: S3Options | None = None
) -> BlobStore:
    """:func:`open_store`, then reach it once (:meth:`BlobStore.check`)."""
    store = open_store(url, default_root, options)
    store.check()
    return store
