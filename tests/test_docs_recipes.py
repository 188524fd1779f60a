"""docs/architecture.md's recipes are the truth: the lists they name follow the contract's
descriptors, and there is one recipe for a new RPC (docs/coordinator.md links to it)."""

from __future__ import annotations

import re
from pathlib import Path

from kgrpc.v1 import coordinator_pb2, inference_pb2

ROOT = Path(__file__).resolve().parents[1]
ARCH = (ROOT / "docs" / "architecture.md").read_text()


def _listed(after: str, until: str) -> list[str]:
    """The backquoted names in docs/architecture.md between ``after`` and ``until``."""
    start = ARCH.index(after)
    return re.findall(r"`(\w+)`", ARCH[start : ARCH.index(until, start)])


def test_the_coordinators_rpc_list_is_the_services() -> None:
    listed = _listed("RPCs: `Register`", "plus gRPC health")
    methods = [m.name for m in coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].methods]
    assert sorted(listed) == sorted(methods), (
        "docs/architecture.md's list of the Coordinator's RPCs differs from "
        f"protos/kgrpc/v1/coordinator.proto: missing {sorted(set(methods) - set(listed))}, "
        f"not in the service {sorted(set(listed) - set(methods))}"
    )


def test_the_inference_rpc_list_is_the_services() -> None:
    listed = _listed("RPCs: `Evaluate`", "`/metrics`")
    methods = [m.name for m in inference_pb2.DESCRIPTOR.services_by_name["Inference"].methods]
    assert sorted(listed) == sorted(methods)


def test_one_recipe_for_a_new_rpc() -> None:
    coordinator_doc = (ROOT / "docs" / "coordinator.md").read_text()
    line = next(ln for ln in coordinator_doc.splitlines() if ln.startswith("A new RPC"))
    assert "architecture.md#where-a-change-goes" in line
    recipe = ARCH[ARCH.index("- **A new RPC**") : ARCH.index("- **A rules preset**")]
    # It names each list a test holds a new RPC to, and which read path a read-only RPC uses.
    for named in ("kgrpc/net/limits.py", "docs/operations.md", "app.reader", "app.db", "auth"):
        assert named in recipe, named
