"""Write docs/operations.md's table of request field limits from kgrpc/net/limits.py
(``FIELDS`` and ``ELSEWHERE``): a repository tool, not installed.

``python scripts/limits_table.py`` rewrites the block between the two markers; ``--check``
exits 1 if the block differs from what limits.py renders (tests/test_net_limits.py runs the
same check). ``--doc PATH`` works on another file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgrpc.net import limits  # noqa: E402

DOC = ROOT / "docs" / "operations.md"
BEGIN = "<!-- field limits: generated from kgrpc/net/limits.py by scripts/limits_table.py -->"
END = "<!-- end of generated field limits -->"


def table() -> str:
    """The table: each field of ``FIELDS`` with its limit, then each of ``ELSEWHERE``."""
    rows = [f"| `{name.removeprefix('kgrpc.v1.')}` | {n:,} |" for name, n in limits.FIELDS.items()]
    rows += [
        f"| `{name.removeprefix('kgrpc.v1.')}` | {text} |"
        for name, text in limits.ELSEWHERE.items()
    ]
    return "\n".join(["| field | limit |", "|---|---|", *rows]) + "\n"


def render(text: str, doc: Path) -> str:
    """``text`` with its generated block replaced by what limits.py renders now."""
    try:
        head, rest = text.split(BEGIN + "\n", 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"{doc}: no {BEGIN!r} ... {END!r} block") from None
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    parser.add_argument("--doc", type=Path, default=DOC, help="the file to write or check")
    args = parser.parse_args(argv)
    text = args.doc.read_text()
    fresh = render(text, args.doc)
    if args.check:
        if fresh != text:
            print(f"{args.doc}: the field limits are stale: run python scripts/limits_table.py")
            return 1
        return 0
    if fresh != text:
        args.doc.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
