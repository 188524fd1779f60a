"""int8 in the loop (issue 32): with kgrpc-cluster's --int8 on, the trainer exports a candidate
in int8 as well, calibrated on its training window and parity-checked; its publisher sends both
files to a real coordinator; a CPU worker set to ``precision = auto`` downloads and plays the
int8 file. With --int8 off only the fp32 file exists and the worker plays that."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from kgrpc.coordinator.testing import RunningCoordinator  # noqa: E402
from kgrpc.precision import info_precisions, variant_path  # noqa: E402
from kgrpc.programs.bench.train import write_synthetic_run  # noqa: E402
from kgrpc.programs.cluster.options import parse_args  # noqa: E402
from kgrpc.programs.cluster.run import trainer_flags  # noqa: E402
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc  # noqa: E402
from kgrpc.worker.config import WorkerConfig  # noqa: E402
from kgrpc.worker.evaluators import Evaluators  # noqa: E402
from kgrpc.worker.models import ModelCache  # noqa: E402
from tests.inference_helpers import positions  # noqa: E402
from trainer import config as trainer_config  # noqa: E402
from trainer.data import ShardIndex, WindowLoader  # noqa: E402
from trainer.export import export_precisions  # noqa: E402
from trainer.model import KgrpcNet  # noqa: E402
from trainer.parity import ParityBounds  # noqa: E402
from trainer.positions import draw_sets  # noqa: E402
from trainer.publish import publish_release  # noqa: E402

LOOSE = ParityBounds(min_top1=0.5, max_kl=0.05, max_value_mae=0.05, max_score_mae=2.0)


def _trainer_precisions(int8: str) -> list[str]:
    """The precisions the trainer of ``kgrpc-cluster --profile learn9 --int8 INT8`` exports."""
    cfg = parse_args(["--profile", "learn9", "--int8", int8])
    parser = argparse.ArgumentParser()
    trainer_config.add_arguments(parser)
    args = parser.parse_args(trainer_flags(cfg.trainer_settings()))
    return trainer_config.SETTINGS.from_args(args, env={}).validate().export_precisions


def _export_candidate(out: Path, data: Path, name: str, precisions: list[str]) -> Path:
    """What trainer.train.export_generation does: parity and calibration sets drawn from the
    training window."""
    write_synthetic_run(data, 2, 60, 6, 7)
    window = WindowLoader(window_games=12).load(ShardIndex(data).refresh())
    sets = draw_sets([7], 64, window=window, seed=1)
    torch.manual_seed(0)
    outcome = export_precisions(
        KgrpcNet(1, 8).eval(),
        out / f"{name}.onnx",
        precisions,
        name=name,
        board_sizes=[7],
        training_steps=10,
        training_rows=120,
        sets=sets,
        bounds=LOOSE,
    )
    assert outcome.ok, outcome.refused
    return out / f"{name}.onnx"


@pytest.mark.slow
@pytest.mark.usefixtures("int8_cpu")
@pytest.mark.parametrize("int8", ["on", "off"])
async def test_int8_candidate_is_published_and_played_by_a_cpu_worker(
    int8: str, coordinator_factory, tmp_path: Path
) -> None:
    precisions = _trainer_precisions(int8)
    assert precisions == (["fp32", "int8"] if int8 == "on" else ["fp32"])
    name = "kg-b1c8-s10-d120"
    path = _export_candidate(tmp_path / "models", tmp_path / "data", name, precisions)
    if int8 == "on":
        import onnx

        props = {p.key: p.value for p in onnx.load(variant_path(path, "int8")).metadata_props}
        # Calibrated on the training window's positions, not on random games.
        assert props["kgrpc.precision"] == "int8" and "window" in props["kgrpc.calibration"]
    coord: RunningCoordinator = await coordinator_factory(
        gating_enabled=False,
        # A random net's policy is nearly flat: its top move is a coin toss between
        # precisions on positions it was not calibrated on, so only KL and values bind here.
        parity_min_top1=0.0,
        parity_max_kl=LOOSE.max_kl,
        parity_max_value_mae=LOOSE.max_value_mae,
        parity_max_score_mae=LOOSE.max_score_mae,
    )
    outcome = await publish_release(coord.address, coord.trainer_token, path)
    assert not outcome.refused, outcome.refused
    assert outcome.sent == precisions
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
        assert latest.found and latest.model.name == name
        assert info_precisions(latest.model) == precisions
        cfg = WorkerConfig(
            coordinator=coord.address,
            token=coord.worker_token,
            work_dir=tmp_path / "worker",
            inference="local",
            device="cpu",
            precision="auto",
            max_batch=8,
            quiet=True,
        )
        ev = Evaluators(cfg, ModelCache(cfg.model_path))
        try:
            await ev.prepare(stub, name, latest.model)
            evaluator, arg = ev.get(name)
            want = "int8" if int8 == "on" else "fp32"
            assert ev.local.registry.models[arg].engine.precision == want
            assert (cfg.model_path / variant_path(f"{name}.onnx", want).name).is_file()
            planes, g = positions(4, 7, 2)
            res = await evaluator.evaluate(planes, g, model=arg)
            assert np.isfinite(res.value).all() and res.policy.shape == (4, 50)
        finally:
            await ev.close()
