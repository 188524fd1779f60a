"""Model names and the trainer's config (TOML + CLI precedence, validation)."""

from __future__ import annotations

import argparse

import pytest

from trainer import config as config_mod
from trainer.naming import ModelName, format_name, parse_name


def test_name_round_trip_and_source_pattern() -> None:
    name = format_name("kg", 6, 96, 1200, 250000)
    assert name == "kg-b6c96-s1200-d250000"
    assert parse_name(name) == ModelName("kg", 6, 96, 1200, 250000)
    assert parse_name(name).file_name == "kg-b6c96-s1200-d250000.onnx"
    assert (
        str(parse_name("kata1-b18c384-s9996604416-d4316597426"))
        == "kata1-b18c384-s9996604416-d4316597426"
    )


@pytest.mark.parametrize(
    "bad", ["kg-b6c96-s1", "kg_b6c96-s1-d2", "-b6c96-s1-d2", "kg-b6c96-s-1-d2", "k-g-b6c96-s1-d2"]
)
def test_bad_names_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="bad model name"):
        parse_name(bad)


def test_bad_series_rejected() -> None:
    with pytest.raises(ValueError, match="series"):
        format_name("my-run", 1, 16, 0, 0)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    config_mod.add_arguments(p)
    return p.parse_args(argv)


def test_defaults_are_the_source_design() -> None:
    cfg = config_mod.from_args(_parse([]))
    assert (cfg.lr, cfg.batch_size) == (1e-4, 256)
    assert (cfg.policy_weight, cfg.value_weight, cfg.score_weight, cfg.ownership_weight) == (
        1.0,
        1.0,
        0.5,
        0.5,
    )
    assert cfg.window_games == 100_000
    assert (cfg.blocks, cfg.channels, cfg.series) == (6, 96, "kg")


def test_toml_then_flags(tmp_path) -> None:
    toml = tmp_path / "train.toml"
    toml.write_text('[train]\nlr = 1\nbatch_size = 32\nseries = "demo"\nsymmetries = false\n')
    cfg = config_mod.from_args(_parse(["--config", str(toml), "--batch-size", "8"]))
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.batch_size == 8  # the flag wins over the file
    assert cfg.series == "demo" and cfg.symmetries is False
    cfg = config_mod.from_args(_parse(["--config", str(toml), "--symmetries"]))
    assert cfg.symmetries is True


def test_flat_toml_and_errors(tmp_path) -> None:
    flat = tmp_path / "flat.toml"
    flat.write_text("steps_per_generation = 7\n")
    assert config_mod.from_args(_parse(["--config", str(flat)])).steps_per_generation == 7
    typo = tmp_path / "typo.toml"
    typo.write_text("batchsize = 7\n")
    with pytest.raises(ValueError, match="unknown keys \\['batchsize'\\]"):
        config_mod.from_args(_parse(["--config", str(typo)]))
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('batch_size = "big"\n')
    with pytest.raises(ValueError, match="batch_size"):
        config_mod.from_args(_parse(["--config", str(wrong)]))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        config_mod.from_args(_parse(["--batch-size", "0"]))


def test_token_never_persisted() -> None:
    cfg = config_mod.from_args(_parse(["--token", "s3cret"]))
    assert cfg.resolved_token() == "s3cret"
    assert "token" not in cfg.to_dict()
