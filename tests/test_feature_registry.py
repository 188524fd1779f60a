"""The registry of input planes and globals (kgrpc.schema.INPUT_FEATURES) is the one place the
net's input is described: the counts, the packed length, what the feature version names, the
native core's check and docs/formats.md's tables follow from it, and no other file writes a
count out (docs/architecture.md, "An input feature")."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kgrpc import native, schema
from kgrpc.schema import INPUT_FEATURES, InputFeature

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "feature_tables.py"

# What the newcomer added (minigo's capture feature): one plane at the end.
CAPTURE = InputFeature("captures", "points whose play would capture at least one stone")
WITH_CAPTURE = dataclasses.replace(INPUT_FEATURES, planes=(*INPUT_FEATURES.planes, CAPTURE))


def test_the_feature_version_names_this_registry() -> None:
    schema.check_feature_digest()  # the message says what to do when this fails
    assert max(schema.FEATURE_DIGESTS) == schema.FEATURE_VERSION
    assert len(set(schema.FEATURE_DIGESTS.values())) == len(schema.FEATURE_DIGESTS)
    assert sum(p.count for p in INPUT_FEATURES.planes) == schema.NUM_PLANES
    assert len(INPUT_FEATURES.globals) == schema.NUM_GLOBALS
    history = next(p for p in INPUT_FEATURES.planes if p.name == "history")
    assert history.count == schema.HISTORY_PLANES
    assert INPUT_FEATURES.plane("history") + schema.HISTORY_PLANES <= schema.NUM_PLANES


def test_a_new_plane_moves_every_count_and_asks_for_a_new_version() -> None:
    n = schema.NUM_PLANES
    assert WITH_CAPTURE.num_planes == n + 1 and WITH_CAPTURE.num_globals == schema.NUM_GLOBALS
    for size in (2, 9, 19):
        assert WITH_CAPTURE.packed_row_bytes(size) == -(-(n + 1) * size * size // 8)
    assert WITH_CAPTURE.plane("captures") == n
    # The same version with another registry is refused, saying to raise it ...
    raised = schema.FEATURE_VERSION + 1
    with pytest.raises(ValueError, match=f"raise FEATURE_VERSION to {raised} and record"):
        schema.check_feature_digest(WITH_CAPTURE)
    # ... raised without its digest, it says to record it ...
    with pytest.raises(ValueError, match=rf"record it as FEATURE_DIGESTS\[{raised}\]"):
        schema.check_feature_digest(WITH_CAPTURE, raised)
    # ... and once recorded, it is what the new version names.
    digests = {**schema.FEATURE_DIGESTS, raised: WITH_CAPTURE.digest()}
    schema.check_feature_digest(WITH_CAPTURE, raised, digests)
    # The docs table follows: the new plane is a row with its index.
    table = WITH_CAPTURE.markdown()
    assert f"| {n} | `captures` | {CAPTURE.meaning} |" in table
    assert f"NUM_PLANES = {n + 1}" in table
    # A meaning reworded is prose: the same encoding, the same version.
    reworded = dataclasses.replace(
        INPUT_FEATURES,
        planes=(dataclasses.replace(INPUT_FEATURES.planes[0], meaning="x"),)
        + INPUT_FEATURES.planes[1:],
    )
    schema.check_feature_digest(reworded)


@pytest.mark.skipif(not native.ENABLED, reason="kgrpc-native is not installed")
def test_the_native_core_exports_the_schemas_counts_and_is_checked() -> None:
    ext = native.ext
    assert (ext.NUM_PLANES, ext.NUM_GLOBALS, ext.FEATURE_VERSION) == (
        schema.NUM_PLANES,
        schema.NUM_GLOBALS,
        schema.FEATURE_VERSION,
    )
    assert native.refusal(ext) is None
    # A registry with one more plane (the C++ encoder not rebuilt) refuses this extension.
    why = native.refusal(ext, WITH_CAPTURE, schema.FEATURE_VERSION + 1)
    assert why is not None and why.endswith("(rebuild it: make install)")
    assert f"NUM_PLANES {schema.NUM_PLANES} (kgrpc expects {schema.NUM_PLANES + 1})" in why
    assert f"FEATURE_VERSION {schema.FEATURE_VERSION} (kgrpc expects" in why


def test_a_stale_extension_is_refused_with_the_rebuild_message() -> None:
    # An extension built before it exported its counts (what an old install holds).
    stale = types.ModuleType("kgrpc_native")
    stale.API_VERSION = native.API_VERSION  # type: ignore[attr-defined]
    stale.FEATURE_VERSION = schema.FEATURE_VERSION  # type: ignore[attr-defined]
    why = native.refusal(stale)
    assert why is not None and "NUM_PLANES None" in why and "make install" in why


def test_the_formats_doc_tables_are_the_registrys() -> None:
    check = [sys.executable, str(SCRIPT), "--check"]
    proc = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_table_script_rewrites_a_stale_table(tmp_path: Path) -> None:
    doc = tmp_path / "formats.md"
    fresh = (ROOT / "docs" / "formats.md").read_text()
    doc.write_text(fresh.replace("| 1 | `own_stones` | own stones |\n", ""))
    run = [sys.executable, str(SCRIPT), "--doc", str(doc)]
    assert subprocess.run([*run, "--check"], capture_output=True, timeout=60).returncode == 1
    assert subprocess.run(run, timeout=60).returncode == 0
    assert doc.read_text() == fresh


# Where a count written out would go stale with a new plane: code, tests and docs. The
# registry's own file, the C++ definitions it is checked against and the generated tables are
# where the numbers live; bench results are records of past runs.
_P, _G, _V = schema.NUM_PLANES, schema.NUM_GLOBALS, schema.FEATURE_VERSION
_BYTES = "|".join(str(schema.packed_row_bytes(s)) for s in (5, 7, 9, 13, 19))
_WRITTEN_OUT = re.compile(
    "|".join(
        f"(?:{p})"
        for p in (
            r"NUM_PLANES\s*=\s*\d",
            r"NUM_GLOBALS\s*=\s*\d",
            rf"\b{_P}\s*\*\s*(?:N|n|size|\d+)\b",  # 15*N*N, 15 * 81
            # Shapes in prose: [B, 15, N, N], [15, N*N], (15, N, N); in code: reshape(15, 7, 7),
            # np.zeros((64, 15, size, size)), torch.rand(3, 15, n, n), shape == (16, 15, 5, 5)
            # (the count after a batch axis: a batch of 16 is not a plane count).
            rf"\[\s*(?:\w+,\s*)?{_P},\s*(?:N|n)\b",
            rf"\(\s*(?:\w+,\s*)?{_P},\s*N\b",
            rf"reshape\(\s*(?:\w+,\s*)?{_P},",
            rf"(?:zeros|ones|empty|rand|random|integers|full)\(\(?\s*\w+,\s*{_P},",
            rf"shape\s*==\s*\(\w+,\s*{_P},",
            rf"\[(?:B|R|rows|batch|count|max_rows),\s*{_G}\]",  # [B, 8]
            rf"float32\s*\[{_G}\]",
            rf"(?:zeros|ones|empty|rand|random)\(\(?\s*\w+,\s*{_G}\)",  # np.zeros((4, 8), ...)
            rf"\b{_P} (?:input )?planes\b",
            rf"\b{_G} (?:globals|global features|floats)\b",
            # A packed length: z["states"].shape == (12, 152), states.shape[1] == 152.
            rf"states\W*\.shape(?:\[1\]\s*==\s*|\s*==\s*\(\w+,\s*)(?:{_BYTES})\b",
            rf"\bfeature_version\b[\"']?\s*[:=]=?\s*[\"']?{_V}\b",  # =1, "...": "1", == 1
            rf"\bFEATURE_VERSION\s*(?:=\s*)?{_V}\b",
        )
    )
)
_DEFINED_HERE = {"kgrpc/schema.py", "tests/test_feature_registry.py"}


def _scanned() -> list[Path]:
    globs = ("kgrpc/**/*.py", "inference/**/*.py", "trainer/**/*.py", "tests/*.py", "scripts/*")
    files = [
        p for g in (*globs, "native/src/*", "docs/*.md", "clients-src/**/*.*") for p in ROOT.glob(g)
    ]
    return sorted(
        p
        for p in files
        if p.is_file() and "v1" not in p.relative_to(ROOT).parts[:2] and "static" not in p.parts
    )


def test_no_count_is_written_out_where_it_derives_from_the_registry() -> None:
    begin, end = "<!-- input tables:", "<!-- end of generated input tables -->"
    found = []
    for path in _scanned():
        rel = str(path.relative_to(ROOT))
        if rel in _DEFINED_HERE:
            continue
        generated = False
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            generated = (generated or line.startswith(begin)) and not line.startswith(end)
            defined = rel == "native/src/features.cpp" and line.startswith("constexpr int ")
            if not generated and not defined and _WRITTEN_OUT.search(line):
                found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, (
        "counts of the input written out; take them from kgrpc/schema.py (NUM_PLANES, "
        "NUM_GLOBALS, packed_row_bytes, FEATURE_VERSION) or name them in prose:\n"
        + "\n".join(found)
    )
