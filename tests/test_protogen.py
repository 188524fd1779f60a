"""scripts/protogen.py (``make proto`` / ``make check-proto``): the checked-in kgrpc/v1 is fresh,
and a changed .proto is reported as stale."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "protogen.py"


def load_protogen():
    spec = importlib.util.spec_from_file_location("protogen", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh_and_a_changed_proto_is_detected(tmp_path) -> None:
    assert load_protogen().check() == []
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "protos", copy / "protos")
    shutil.copytree(ROOT / "kgrpc" / "v1", copy / "kgrpc" / "v1")
    (copy / "scripts").mkdir()
    shutil.copy(SCRIPT, copy / "scripts" / "protogen.py")
    proto = copy / "protos" / "kgrpc" / "v1" / "common.proto"
    old = "bool suicide_allowed = 3;"
    assert old in proto.read_text()
    proto.write_text(proto.read_text().replace(old, old + "\n  bool extra = 4;"))
    env = {**os.environ, "PYTHONPATH": ""}
    res = subprocess.run(
        [sys.executable, str(copy / "scripts" / "protogen.py"), "--check"],
        capture_output=True,
        text=True,
        env=env,
        cwd=copy,
    )
    assert res.returncode == 1 and "stale: kgrpc/v1/common_pb2.py" in res.stderr
