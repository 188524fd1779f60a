"""Blob storage for shards, model files and SGF: one interface (:class:`BlobStore`), a local
directory backend (the default: a data directory as it has always been laid out) and an
S3-API backend (obstore). Used by the coordinator and the trainer; docs/architecture.md has
the key layout."""

from kgrpc.blobstore.base import (
    BlobExistsError,
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    BlobUnavailableError,
    ObjectInfo,
    check_key,
)
from kgrpc.blobstore.local import LocalBlobStore
from kgrpc.blobstore.s3 import S3Options
from kgrpc.blobstore.url import is_remote, open_checked, open_store

__all__ = [
    "BlobExistsError",
    "BlobNotFoundError",
    "BlobStore",
    "BlobStoreError",
    "BlobUnavailableError",
    "LocalBlobStore",
    "ObjectInfo",
    "S3Options",
    "check_key",
    "is_remote",
    "open_checked",
    "open_store",
]
