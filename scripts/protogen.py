"""Generate the Python code of the gRPC contract (``make proto``): a repository tool, not installed.

``python scripts/protogen.py`` regenerates ``kgrpc/v1/*_pb2*.py(i)`` from
``protos/kgrpc/v1/*.proto``; ``--check`` regenerates into a temporary folder and
exits 1 if the checked-in code differs (stale), naming the files.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_DIR = PROTO_ROOT / "kgrpc" / "v1"
OUT_PKG = Path("kgrpc") / "v1"
INIT_TEXT = (
    '"""Generated protobuf and gRPC code for package kgrpc.v1 (do not edit; `make proto`)."""\n'
)


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_root: Path) -> list[Path]:
    """Run protoc into ``out_root``; return the generated files relative to it."""
    import grpc_tools
    from grpc_tools import protoc  # dev dependency, imported only here

    include = Path(grpc_tools.__file__).parent / "_proto"
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")
    pkg = out_root / OUT_PKG
    (pkg / "__init__.py").write_text(INIT_TEXT)
    return sorted(p.relative_to(out_root) for p in pkg.iterdir() if p.is_file())


def check() -> list[str]:
    """Return the names of generated files that are missing, extra or different."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        fresh_names = {p.name for p in fresh}
        have = {
            p.name
            for p in (ROOT / OUT_PKG).iterdir()
            if p.is_file() and p.suffix in (".py", ".pyi")
        }
        for name in sorted(fresh_names - have):
            problems.append(f"missing: {OUT_PKG / name}")
        for name in sorted(have - fresh_names):
            problems.append(f"not generated from any .proto: {OUT_PKG / name}")
        for name in sorted(fresh_names & have):
            if not filecmp.cmp(Path(tmp) / OUT_PKG / name, ROOT / OUT_PKG / name, shallow=False):
                problems.append(f"stale: {OUT_PKG / name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if the checked-in code is stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        if problems:
            print(
                "generated code is stale; run `make proto`:", *problems, sep="\n  ", file=sys.stderr
            )
            return 1
        print("generated code is up to date")
        return 0
    out = generate(ROOT)
    print("generated:", *(str(p) for p in out), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
