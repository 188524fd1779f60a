"""The argparse side of the coordinator's settings: one ``--flag`` per
:class:`~kgrpc.coordinator.config.Config` field (through
:data:`kgrpc.coordinator.config.SETTINGS`), the flags given as overrides, a field's help text,
and boolean flag values as argparse errors.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from kgrpc import settings
from kgrpc.coordinator.config import SETTINGS


def parse_bool(value: str) -> bool:
    """``true``/``false`` (also yes/no, on/off, 1/0) for boolean flags; argparse shows the
    error."""
    try:
        return settings.parse_bool(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def setting_help(f: dataclasses.Field[Any]) -> str:
    """The help text of a Config field ("" when it has none)."""
    return str(f.metadata.get("help", ""))


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per Config field (no ``--config``); flags not given stay absent."""
    SETTINGS.add_arguments(parser, config_flag=False)


def flags_to_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return SETTINGS.flag_values(args)
