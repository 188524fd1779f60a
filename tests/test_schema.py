"""One schema (kgrpc/schema.py): shards record their feature version, old shards load as
version 1, and a shard or model of another feature version is refused where it is loaded
(trainer data, inference engine and registry, in-process evaluation) and published."""

from __future__ import annotations

import hashlib
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest

from inference.engine import Engine
from inference.local import LocalEvaluator
from inference.models import ModelRegistry
from kgrpc import schema, shards
from kgrpc.evaluator import EvaluationError
from kgrpc.programs.bench.train import synthetic_rows
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.inference_helpers import make_model, positions
from trainer.data import ShardError, ShardIndex, WindowLoader
from trainer.publish import build_header, publish_model

NAME = "kg-b1c8-s0-d0"
OTHER = schema.FEATURE_VERSION + 1  # a feature version this code does not encode


def shard_arrays(rows: int = 12, games: int = 3, n: int = 5) -> dict[str, np.ndarray]:
    arrays = synthetic_rows(rows, n, np.random.default_rng(0))
    arrays["game_index"] = (np.arange(rows) * games // rows).astype(np.int32)
    return arrays


def write_old_format_shard(path: Path, rows: int = 12, games: int = 3, n: int = 5) -> None:
    """A shard as written before shards recorded their feature version: no such key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {
        k: np.asarray(v, dtype=schema.SHARD_ROW_ARRAYS[k][0])
        for k, v in shard_arrays(rows, games, n).items()
    }
    np.savez(
        path,
        **arrays,
        game_ids=np.array([f"g{i}" for i in range(games)], dtype="<U36"),
        board_size=np.int32(n),
        komi=np.float32(7.5),
        rules=np.array("chinese"),
        format_version=np.int32(1),
    )


def write_shard_with(path: Path, **meta: object) -> None:
    """A shard written by this code, then given other whole-shard values."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shards.write_shard(
        path, shard_arrays(), board_size=5, komi=7.5, rules="chinese", game_ids=["a", "b", "c"]
    )
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    data.update({k: np.int32(v) for k, v in meta.items()})  # type: ignore[call-overload]
    np.savez(path, **data)


def test_counts_are_defined_once() -> None:
    # No module but kgrpc/schema.py assigns the schema's names (importing them is the point).
    import ast

    names = {
        "FEATURE_VERSION",
        "NUM_PLANES",
        "NUM_GLOBALS",
        "HISTORY_PLANES",
        "SHARD_FORMAT_VERSION",
        "FORMAT_VERSION",
        "MODEL_META_PREFIX",
        "META_PREFIX",
        "INPUT_NAMES",
        "OUTPUT_NAMES",
        "packed_row_bytes",
        "MODEL_PRECISION_KEY",
        "MODEL_PARITY_PREFIX",
        "MODEL_CALIBRATION_KEY",
        "PRECISION_KEY",
        "PARITY_KEY_PREFIX",
        "CALIBRATION_KEY",
    }
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [
        *root.glob("kgrpc/**/*.py"),
        *root.glob("inference/*.py"),
        *root.glob("trainer/**/*.py"),
    ]:
        if path.name == "schema.py" or "v1" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (
                [t.id for t in node.targets if isinstance(t, ast.Name)]
                if isinstance(node, ast.Assign)
                else [node.name]
                if isinstance(node, ast.FunctionDef)
                else []
            )
            found += [f"{path.relative_to(root)}: {t}" for t in targets if t in names]
    # kgrpc.shards keeps the names its callers know, bound to the schema's objects.
    assert found == ["kgrpc/shards.py: FORMAT_VERSION"]
    assert shards.ROW_KEYS is schema.SHARD_ROW_ARRAYS
    assert (
        schema.packed_row_bytes(19) == -(-schema.NUM_PLANES * 361 // 8)
        and schema.policy_size(9) == 82
    )


def test_new_shards_record_the_feature_version(tmp_path: Path) -> None:
    path = tmp_path / "games_00001.npz"
    shards.write_shard(
        path, shard_arrays(), board_size=5, komi=7.5, rules="chinese", game_ids=["a", "b", "c"]
    )
    with np.load(path) as z:
        assert int(z["feature_version"]) == schema.FEATURE_VERSION
        assert int(z["format_version"]) == schema.SHARD_FORMAT_VERSION
    header = shards.read_header(path)
    assert (header.rows, header.games, header.board_size) == (12, 3, 5)
    assert header.feature_version == schema.FEATURE_VERSION and header.rules == "chinese"


@pytest.mark.skipif(
    schema.FEATURE_VERSION != schema.LEGACY_FEATURE_VERSION,
    reason="a shard without a recorded version is of the legacy version: refused once raised",
)
def test_old_shard_without_feature_version_loads_as_version_1(tmp_path: Path) -> None:
    path = tmp_path / "training_data" / "run_001" / "games_00001.npz"
    write_old_format_shard(path)
    with np.load(path) as z:
        assert "feature_version" not in z.files
    assert shards.read_header(path).feature_version == schema.LEGACY_FEATURE_VERSION
    data = shards.load_shard(path)
    assert int(data["feature_version"]) == schema.LEGACY_FEATURE_VERSION
    assert data["states"].shape == (12, schema.packed_row_bytes(5))
    # The trainer reads it (through kgrpc.shards) as it reads a new one.
    listed = ShardIndex(tmp_path, strict=True).refresh()
    assert [(s.rows, s.games, s.board_size) for s in listed] == [(12, 3, 5)]
    window = WindowLoader(10, strict=True).load(listed)
    assert window.rows == 12 and window.games == 3
    np.testing.assert_array_equal(window.by_size[5].states, data["states"])


def test_shard_of_another_feature_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "training_data" / "run_001" / "games_00001.npz"
    write_shard_with(path, feature_version=OTHER)
    for load in (shards.load_shard, shards.read_header):
        with pytest.raises(shards.ShardFeatureVersionError) as err:
            load(path)
        assert isinstance(err.value, schema.FeatureVersionError) and err.value.version == OTHER
        assert (
            f"{path}: feature version {OTHER}, but this kgrpc encodes positions as feature "
            f"version {schema.FEATURE_VERSION}" in str(err.value)
        )
    # Trainer: listing refuses it (strict) or leaves it out and says why (the run loop's mode).
    with pytest.raises(ShardError, match=f"feature version {OTHER}"):
        ShardIndex(tmp_path, strict=True).refresh()
    lenient = ShardIndex(tmp_path)
    assert lenient.refresh() == [] and f"feature version {OTHER}" in lenient.errors[path]
    # Listed while it was this version, replaced before the window loads it: refused too.
    write_shard_with(path, feature_version=schema.FEATURE_VERSION)
    listed = ShardIndex(tmp_path, strict=True).refresh()
    write_shard_with(path, feature_version=OTHER)
    with pytest.raises(ShardError, match=f"feature version {OTHER}"):
        WindowLoader(10, strict=True).load(listed)
    assert WindowLoader(10).load(listed).rows == 0


def test_trainer_checks_the_shard_format_version_and_dtypes(tmp_path: Path) -> None:
    path = tmp_path / "training_data" / "run_001" / "games_00001.npz"
    write_shard_with(path, format_version=2)
    with pytest.raises(ShardError, match="format_version 2, this code reads 1"):
        ShardIndex(tmp_path, strict=True).refresh()
    write_shard_with(path)
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    data["value"] = data["value"].astype(np.float64)  # right shape, wrong dtype
    np.savez(path, **data)
    with pytest.raises(ShardError, match=r"value is float64\[12\], expected float32\[12\]"):
        WindowLoader(10, strict=True).load(ShardIndex(tmp_path).refresh())


def model_with_feature_version(path: Path, version: int | None) -> Path:
    """A real model file whose ``kgrpc.feature_version`` says ``version`` (None: absent, as a
    model exported before the metadata existed)."""
    make_model(path, NAME)
    proto = onnx.load(str(path))
    props = [(p.key, p.value) for p in proto.metadata_props if p.key != "kgrpc.feature_version"]
    if version is not None:
        props.append(("kgrpc.feature_version", str(version)))
    del proto.metadata_props[:]
    for key, value in props:
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.slow
def test_engine_refuses_a_model_of_another_feature_version(tmp_path: Path) -> None:
    bad = model_with_feature_version(tmp_path / "v2.onnx", OTHER)
    with pytest.raises(
        schema.FeatureVersionError,
        match=f"model file {bad}: feature version {OTHER}, but this kgrpc encodes",
    ):
        Engine(bad, device="cpu")
    old = model_with_feature_version(tmp_path / "old.onnx", None)  # legacy: no version
    if schema.FEATURE_VERSION == schema.LEGACY_FEATURE_VERSION:
        assert Engine(old, device="cpu").info.feature_version == schema.LEGACY_FEATURE_VERSION
    else:
        with pytest.raises(schema.FeatureVersionError):
            Engine(old, device="cpu")
    with pytest.raises(ValueError, match="feature_version is 'two', not an integer"):
        junk = model_with_feature_version(tmp_path / "junk.onnx", "two")  # type: ignore[arg-type]
        Engine(junk, device="cpu")


async def test_registry_and_local_evaluation_refuse_it(tmp_path: Path) -> None:
    bad = model_with_feature_version(tmp_path / "v2.onnx", OTHER)
    registry = ModelRegistry(device="cpu")
    try:
        with pytest.raises(schema.FeatureVersionError, match=f"feature version {OTHER}"):
            await registry.load(str(bad))
        assert registry.models == {} and registry.default == ""
    finally:
        await registry.close()
    # In-process evaluation (a worker's --inference local, kgrpc-cluster's evaluation games).
    ev = LocalEvaluator(str(bad), device="cpu")
    try:
        with pytest.raises(schema.FeatureVersionError):
            await ev.start()
        planes, g = positions(2, 5, 0)
        with pytest.raises(EvaluationError) as err:
            await ev.evaluate(planes, g)
        assert (
            err.value.code == "FAILED_PRECONDITION"
            and f"feature version {OTHER}" in err.value.message
        )
        assert ev.evals == 0
    finally:
        await ev.close()


@pytest.mark.slow
async def test_publish_refuses_another_feature_version(coordinator, tmp_path: Path) -> None:
    bad = model_with_feature_version(tmp_path / "v2.onnx", OTHER)
    # The trainer's publish refuses before connecting ...
    with pytest.raises(schema.FeatureVersionError, match=f"feature version {OTHER}"):
        build_header(bad)
    with pytest.raises(schema.FeatureVersionError):
        await publish_model(coordinator.address, coordinator.trainer_token, bad)
    # ... and the coordinator refuses a header that says so (or says nothing), storing nothing.
    data = bad.read_bytes()
    for version, shown in (
        (OTHER, f"feature version {OTHER},"),
        (0, "feature version 0 (none given)"),
    ):
        header = coordinator_pb2.PublishHeader(
            name=NAME,
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            feature_version=version,
        )
        requests = [
            coordinator_pb2.PublishModelRequest(header=header),
            coordinator_pb2.PublishModelRequest(data=data),
        ]
        async with coordinator.channel("trainer") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await coordinator_pb2_grpc.CoordinatorStub(ch).PublishModel(iter(requests))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"model '{NAME}': {shown}" in err.value.details()
        assert (
            f"this kgrpc encodes positions as feature version {schema.FEATURE_VERSION}"
            in err.value.details()
        )
    assert list((coordinator.data_dir / "models").iterdir()) == []
    # The same file with this code's version goes through.
    good = model_with_feature_version(tmp_path / "v1.onnx", schema.FEATURE_VERSION)
    resp = await publish_model(coordinator.address, coordinator.trainer_token, good)
    assert resp.model.name == NAME and resp.model.feature_version == schema.FEATURE_VERSION
