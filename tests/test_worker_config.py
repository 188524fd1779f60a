"""kgrpc-worker's settings: a TOML file (top level and a [worker] table), the command line
over it, and unknown or mistyped keys refused with the file's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgrpc.worker.config import build_config


def test_config_toml_and_cli_precedence(tmp_path: Path) -> None:
    toml = tmp_path / "w.toml"
    toml.write_text(
        'coordinator = "h:1"\ntoken = "t"\nparallel-games = 7\n'
        'inference = "a:1,b:2"\n[worker]\nusername = "ann"\n'
    )
    cfg = build_config(toml, parallel_games=9, games=None)
    assert (cfg.coordinator, cfg.username, cfg.parallel_games) == ("h:1", "ann", 9)
    assert cfg.inference_addresses == ["a:1", "b:2"]
    toml.write_text("bogus = 1\n")
    with pytest.raises(ValueError, match=r"w.toml: unknown keys \['bogus'\]"):
        build_config(toml)
    toml.write_text('parallel_games = "many"\n')
    with pytest.raises(ValueError, match="parallel_games must be an integer"):
        build_config(toml)


def test_nice_is_a_priority_the_os_takes() -> None:
    assert build_config(nice=19).nice == 19
    for bad in (-1, 20):
        with pytest.raises(ValueError, match=f"nice must be between 0 and 19, got {bad}"):
            build_config(nice=bad)


def test_idle_needs_linux_sched_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """--idle sets Linux's SCHED_IDLE policy; where the OS has none it is refused with the
    alternative named, before the worker starts."""
    import os

    if hasattr(os, "SCHED_IDLE"):
        assert build_config(idle=True).idle
        monkeypatch.delattr(os, "SCHED_IDLE")
    with pytest.raises(
        ValueError, match="idle needs Linux's SCHED_IDLE policy; on this OS use nice"
    ):
        build_config(idle=True)
