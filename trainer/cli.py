"""``kgrpc-train``: initialise, train, export and publish kgrpc networks."""

from __future__ import annotations

import argparse
import importlib
import sys

from kgrpc.cli_help import ProgramParser

COMMANDS = {
    "init": "trainer.commands.init",
    "run": "trainer.commands.run",
    "export": "trainer.commands.export",
    "publish": "trainer.commands.publish",
}


def build_parser() -> argparse.ArgumentParser:
    """``run``'s settings come from kgrpc.settings (trainer/config.py); every other flag also
    reads ``KGRPC_TRAINER_<FLAG>`` (kgrpc.cli_help: flag > variable > default)."""
    parser = ProgramParser(
        prog="kgrpc-train",
        description="Train kgrpc networks from the coordinator's shards and publish them.",
        env_program="trainer",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # not written yet in this checkout
                continue
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
