"""Write docs/formats.md section 2's plane and global tables from the input registry
(``kgrpc.schema.INPUT_FEATURES``): a repository tool, not installed.

``python scripts/feature_tables.py`` rewrites the block between the two markers;
``--check`` exits 1 if the block differs from what the registry renders (a test runs the same
comparison, tests/test_feature_registry.py). ``--doc PATH`` works on another file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgrpc.schema import INPUT_FEATURES  # noqa: E402

DOC = ROOT / "docs" / "formats.md"
BEGIN = "<!-- input tables: generated from kgrpc/schema.py by scripts/feature_tables.py -->"
END = "<!-- end of generated input tables -->"


def split(text: str, doc: Path) -> tuple[str, str, str]:
    """(before, block, after) around the markers; ValueError naming ``doc`` without them."""
    try:
        head, rest = text.split(BEGIN + "\n", 1)
        block, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"{doc}: no {BEGIN!r} ... {END!r} block") from None
    return head, block, tail


def render(text: str, doc: Path) -> str:
    """``text`` with its generated block replaced by what the registry renders now."""
    head, _, tail = split(text, doc)
    return f"{head}{BEGIN}\n{INPUT_FEATURES.markdown()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the tables are stale")
    parser.add_argument("--doc", type=Path, default=DOC, help="the file to write or check")
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    fresh = render(text, args.doc)
    if args.check:
        if fresh != text:
            print(f"{args.doc}: input tables are stale: run python scripts/feature_tables.py")
            return 1
        return 0
    if fresh != text:
        args.doc.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
