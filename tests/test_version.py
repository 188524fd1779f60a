"""``--version`` on every program: the one version (``kgrpc.__version__``, which pyproject.toml
reads) and which Go engine runs, so a volunteer can say what they run and an operator can
compare it with the coordinator's minimum."""

from __future__ import annotations

import importlib
import importlib.metadata
import tomllib
from pathlib import Path

import pytest

import kgrpc
from kgrpc import native

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_program_is_covered() -> None:
    assert set(SCRIPTS) == {
        "kgrpc-worker",
        "kgrpc-coordinator",
        "kgrpc-inference",
        "kgrpc-train",
        "kgrpc-gtp",
        "kgrpc-eval",
        "kgrpc-cluster",
        "kgrpc-bench",
    }


def test_the_installed_metadata_is_the_package_version() -> None:
    assert importlib.metadata.version("kgrpc") == kgrpc.__version__


@pytest.mark.parametrize("program", sorted(SCRIPTS))
def test_version_prints_the_package_version(
    program: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module, func = SCRIPTS[program].split(":")
    main = getattr(importlib.import_module(module), func)
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code in (0, None)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{program} {kgrpc.__version__}"
    assert lines[1] == native.describe()
