"""The blob store contract, run on every backend (``store_url``: a local directory and a real
S3 server, SeaweedFS), and the startup check's one-line errors."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from kgrpc.blobstore import (
    BlobExistsError,
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    BlobUnavailableError,
    LocalBlobStore,
    open_checked,
    open_store,
)
from kgrpc.blobstore.s3 import S3Options

SHARD = "training_data/run_001/games_00001.npz"


@pytest.fixture
def store(store_url: tuple[str, Any]) -> BlobStore:
    url, options = store_url
    return open_checked(url, options=options)


def test_put_get_roundtrip(store: BlobStore) -> None:
    data = os.urandom(3 << 20)  # several S3 parts' worth would be multipart: whole either way
    info = store.put_bytes(SHARD, data)
    assert info.size == len(data)
    assert store.get_bytes(SHARD) == data
    assert store.exists(SHARD) and store.size(SHARD) == len(data)
    assert store.stat("training_data/run_001/games_00002.npz") is None
    assert not store.exists("training_data/run_001/games_00002.npz")


def test_put_replaces_whole(store: BlobStore) -> None:
    store.put_bytes("models/m.onnx", b"old content")
    store.put_bytes("models/m.onnx", b"new")
    assert store.get_bytes("models/m.onnx") == b"new"


def test_ranged_get(store: BlobStore) -> None:
    data = bytes(range(256)) * 40
    store.put_bytes("sgf/pack_00001.sgfs", data)
    assert store.get_range("sgf/pack_00001.sgfs", 0, 10) == data[:10]
    assert store.get_range("sgf/pack_00001.sgfs", 1000, 300) == data[1000:1300]
    assert store.get_range("sgf/pack_00001.sgfs", len(data) - 5, 100) == data[-5:]
    assert store.get_range("sgf/pack_00001.sgfs", len(data), 10) == b""
    assert store.get_range("sgf/pack_00001.sgfs", len(data) + 50, 10) == b""
    assert store.get_range("sgf/pack_00001.sgfs", 7, 0) == b""
    with pytest.raises(ValueError):
        store.get_range("sgf/pack_00001.sgfs", -1, 3)
    chunks = list(store.iter_range("sgf/pack_00001.sgfs", 100, chunk=4000))
    assert [o for o, _ in chunks] == [100, 4100, 8100]
    assert b"".join(c for _, c in chunks) == data[100:]


def test_create_only(store: BlobStore) -> None:
    store.put_bytes(SHARD, b"the shard", create_only=True)
    # A replayed upload of the same bytes succeeds and changes nothing ...
    assert store.put_bytes(SHARD, b"the shard", create_only=True).size == 9
    # ... a different object under the same key is refused, and the first one stays.
    with pytest.raises(BlobExistsError):
        store.put_bytes(SHARD, b"another shard", create_only=True)
    with pytest.raises(BlobExistsError):
        store.put_bytes(SHARD, b"the shar!", create_only=True)  # same size, other bytes
    assert store.get_bytes(SHARD) == b"the shard"


def test_put_file_and_download(store: BlobStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    data = os.urandom(200_000)
    src.write_bytes(data)
    assert store.put_file(SHARD, src, create_only=True).size == len(data)
    assert store.put_file(SHARD, src, create_only=True).size == len(data)  # replay
    other = tmp_path / "other.bin"
    other.write_bytes(b"different")
    with pytest.raises(BlobExistsError):
        store.put_file(SHARD, other, create_only=True)
    target = tmp_path / "down" / "deep" / "games_00001.npz"
    assert store.download(SHARD, target).size == len(data)
    assert target.read_bytes() == data
    # No temporary file is left beside the download.
    assert sorted(p.name for p in target.parent.iterdir()) == ["games_00001.npz"]
    with pytest.raises(BlobNotFoundError):
        store.download("models/none.onnx", tmp_path / "none.onnx")
    assert not (tmp_path / "none.onnx").exists()
    with pytest.raises(BlobNotFoundError):
        store.put_file("models/x.onnx", tmp_path / "missing.bin")


def test_missing_objects(store: BlobStore) -> None:
    with pytest.raises(BlobNotFoundError):
        store.get_bytes("models/none.onnx")
    with pytest.raises(BlobNotFoundError):
        store.get_range("models/none.onnx", 0, 10)
    with pytest.raises(BlobNotFoundError):
        store.size("models/none.onnx")
    store.delete("models/none.onnx")  # no error


def test_list_by_prefix_and_delete(store: BlobStore) -> None:
    keys = [
        "training_data/run_001/games_00001.npz",
        "training_data/run_001/games_00002.npz",
        "training_data/run_002/games_00001.npz",
        "training_data/run_0010/games_00001.npz",
        "models/a.onnx",
    ]
    for i, k in enumerate(keys):
        store.put_bytes(k, b"x" * (i + 1))
    got = [(o.key, o.size) for o in store.list("training_data/run_001/")]
    assert got == [(keys[0], 1), (keys[1], 2)]
    assert [o.key for o in store.list("training_data/run_00")] == sorted(keys[:4])
    assert [o.key for o in store.list("models/")] == ["models/a.onnx"]
    assert [o.key for o in store.list("nothing/")] == []
    assert {o.key for o in store.list("")} >= set(keys)
    store.delete(keys[0])
    assert not store.exists(keys[0])
    assert [o.key for o in store.list("training_data/run_001/")] == [keys[1]]


def test_bad_keys_refused(store: BlobStore) -> None:
    for key in ("", "/abs", "a//b", "../up", "a/./b", "a\\b", "a/", "a/\x00"):
        with pytest.raises(ValueError):
            store.put_bytes(key, b"x")
        with pytest.raises(ValueError):
            store.get_bytes(key)


def test_concurrent_create_only_one_winner(store: BlobStore) -> None:
    """Two writers of one key, create-only, with different bytes: exactly one object, whole,
    and the loser told so (never a mix, never a silent overwrite)."""
    results: dict[int, str] = {}
    blobs = {i: bytes([i]) * 500_000 for i in (1, 2)}

    def put(i: int) -> None:
        try:
            store.put_bytes("models/race.onnx", blobs[i], create_only=True)
            results[i] = "ok"
        except BlobExistsError:
            results[i] = "exists"

    threads = [threading.Thread(target=put, args=(i,)) for i in blobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results.values()) == ["exists", "ok"]
    winner = next(i for i, r in results.items() if r == "ok")
    assert store.get_bytes("models/race.onnx") == blobs[winner]


# ---------------------------------------------------------------- local layout, URLs, check
def test_local_store_is_the_data_dir_layout(tmp_path: Path) -> None:
    store = open_store("", default_root=tmp_path)
    assert isinstance(store, LocalBlobStore) and store.is_local
    store.put_bytes(SHARD, b"x")
    assert (tmp_path / "training_data" / "run_001" / "games_00001.npz").read_bytes() == b"x"
    assert store.local_path(SHARD) == tmp_path / SHARD
    # A file written in place (the shard cut's own atomic write) is the object already.
    own = tmp_path / "models" / "m.onnx"
    own.parent.mkdir()
    own.write_bytes(b"model")
    assert store.put_file("models/m.onnx", own).size == 5
    assert store.get_bytes("models/m.onnx") == b"model"
    # Temporary files of kgrpc.durable are never listed as objects.
    (tmp_path / "models" / ".m2.onnx.abc.tmp").write_bytes(b"half")
    assert [o.key for o in store.list("models/")] == ["models/m.onnx"]


def test_urls(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalBlobStore)
    assert open_store(f"file://{tmp_path}").url == str(tmp_path)  # type: ignore[attr-defined]
    for bad, words in [
        ("file://relative/path", "file:///ABSOLUTE"),
        ("s3://", "bucket name"),
        ("s3://Bad_Bucket/x", "bucket name"),
        ("s3://user:pw@bucket/x", "credentials"),
        ("s3://bucket/a/../b", "prefix"),
        ("gs://bucket/x", "unknown scheme"),
    ]:
        with pytest.raises(BlobStoreError, match=words):
            open_store(bad)
    with pytest.raises(BlobStoreError, match="no store given"):
        open_store("")


def test_options_from_aws_variables() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_DEFAULT_REGION": "eu-west-3",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    got = S3Options().resolved(env)
    assert (got.endpoint, got.region, got.access_key_id, got.secret_access_key) == (
        "http://127.0.0.1:9",
        "eu-west-3",
        "id",
        "secret",
    )
    assert got.allow_http  # an http:// endpoint
    assert S3Options(region="us-west-2").resolved({**env, "AWS_REGION": "x"}).region == "us-west-2"
    https = S3Options().resolved({"AWS_ENDPOINT_URL": "https://s3.example"})
    assert not https.allow_http and https.region == "us-east-1"
    assert S3Options().resolved({"AWS_ALLOW_HTTP": "true"}).allow_http


def test_check_names_wrong_credentials(s3_server: Any) -> None:
    with pytest.raises(BlobStoreError, match="refused the credentials") as info:
        open_checked(s3_server.new_url(), options=s3_server.options(secret="wrong"))
    assert "\n" not in str(info.value)


def test_check_names_missing_bucket(s3_server: Any) -> None:
    with pytest.raises(BlobStoreError, match="bucket does not exist") as info:
        open_checked("s3://no-such-bucket/x", options=s3_server.options())
    assert "\n" not in str(info.value)


def test_check_names_unreachable_endpoint(s3_server: Any) -> None:
    from tests.s3_helpers import _free_ports

    opts = S3Options(
        endpoint=f"http://127.0.0.1:{_free_ports(1)[0]}",
        access_key_id="a",
        secret_access_key="b",
    )
    with pytest.raises(BlobUnavailableError, match="cannot be reached") as info:
        open_checked("s3://kgrpc-test/x", options=opts)
    assert "\n" not in str(info.value)


def test_local_check_names_unwritable_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(BlobStoreError, match="cannot create"):
        open_checked(str(blocker / "store"))
