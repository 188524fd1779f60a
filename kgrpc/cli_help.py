"""The flags of every program that are not a daemon's settings, under the settings' convention.

The daemons' settings come from :mod:`kgrpc.settings`. Every other flag (``kgrpc-gtp``,
``kgrpc-eval``, ``kgrpc-cluster``, ``kgrpc-bench``, the subcommands of ``kgrpc-coordinator``
and ``kgrpc-train``, a daemon's ``--verbose``) is added with :func:`env_flag` to a
:class:`ProgramParser`, which follows the same rules (docs/operations.md, "Settings"):

* environment variable ``KGRPC_<PROGRAM>_<FLAG>``: the long flag in capitals, dashes as
  underscores (``kgrpc-gtp --visits`` -> ``KGRPC_GTP_VISITS``; a subcommand's flags use the
  program's prefix: ``kgrpc-coordinator token create --data-dir`` ->
  ``KGRPC_COORDINATOR_DATA_DIR``). Older names stay as fallbacks, read below it
  (``KGRPC_TOKEN`` for ``kgrpc-coordinator stats``). An empty variable is an empty value,
  as ``--flag ''`` would be (``KGRPC_CLUSTER_HTTP_LISTEN=`` turns the dashboard off); for a
  number or a path whose default is none, it clears it.
* precedence: flag > variable > fallback variables > default (these flags have no TOML key).
* ``--help``: every flag's help ends ``(default: X) [env: VAR]``, as the settings' do.
* values from a variable are parsed as the flag's would be (its ``type``, its ``choices``);
  a boolean flag's variable takes ``true/false/yes/no/on/off/1/0`` and the flag has a
  ``--no-FLAG`` too; a repeatable or multi-value flag's variable is a comma-separated list.
  A bad value is a usage error naming the variable.
* a token given as a flag prints :func:`kgrpc.settings.secret_flag_warning` (``secret=True``).
* a flag that chooses between exclusive alternatives, or names what a command deletes, is
  not read from the environment (``no_env=`` says why; its help says ``[env: none, ...]``).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kgrpc.settings import _escape, _show, parse_bool, secret_flag_warning

BOOL_ACTIONS = ("store_true", "store_false")


class _Version(argparse._VersionAction):
    """``--version``: the package version (one place: ``kgrpc.__version__``, which
    pyproject.toml reads too) and which Go engine runs, computed only when asked, so building
    a parser loads no native core."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        from kgrpc import __version__, native

        print(f"{parser.prog} {__version__}\n{native.describe()}")
        parser.exit()


class ProgramParser(argparse.ArgumentParser):
    """An ArgumentParser that knows its program's variable prefix (``env_program``: ``gtp`` ->
    ``KGRPC_GTP_``); its subcommands' parsers are ProgramParsers of the same program.
    ``environ``: where the variables are read (default ``os.environ`` when a flag is added).
    A program's own parser has ``--version``; its subcommands' (``version=False``) do not."""

    def __init__(
        self,
        *args: Any,
        env_program: str,
        environ: Mapping[str, str] | None = None,
        version: bool = True,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self.env_program = env_program
        self.environ = environ
        if version:
            self.add_argument(
                "--version", action=_Version, help="print the version and the Go engine, and exit"
            )

    @property
    def env_prefix(self) -> str:
        return f"KGRPC_{self.env_program.upper()}_"

    def add_subparsers(self, **kw: Any) -> Any:
        kw.setdefault(
            "parser_class",
            functools.partial(
                ProgramParser, env_program=self.env_program, environ=self.environ, version=False
            ),
        )
        return super().add_subparsers(**kw)


def env_var_of(prefix: str, flag: str) -> str:
    """``KGRPC_GTP_`` and ``--analysis-max-visits`` -> ``KGRPC_GTP_ANALYSIS_MAX_VISITS``."""
    return prefix + flag.lstrip("-").replace("-", "_").upper()


class _AppendFresh(argparse.Action):
    """``action="append"`` whose first use replaces the default (a variable's list) instead of
    adding to it: flag > variable."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        items = getattr(namespace, self.dest, None)
        items = [] if items is None or items is self.default else list(items)
        items.append(values)
        setattr(namespace, self.dest, items)


class _SecretStore(argparse._StoreAction):
    """A secret (a token) as a flag: stored, with a warning that ``ps`` shows it."""

    env_var = ""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        program = str(parser.prog).split()[0]
        flag = option_string or self.option_strings[0]
        print(f"{program}: {secret_flag_warning(flag, self.env_var)}", file=sys.stderr)
        super().__call__(parser, namespace, values, option_string)


def _typed(
    inner: Callable[[str], Any] | None,
    env_text: str | None,
    var: str,
    *,
    many: bool,
    choices: Sequence[Any] | None,
    clears: bool,
) -> Callable[[str], Any]:
    """argparse ``type=``: ``inner`` for a flag's text; for the variable's text (the default
    object itself) the whole value, a list when ``many``, checked against ``choices``; an
    empty variable of a typed flag is None when ``clears`` (its default is none)."""
    convert = inner or str

    def typed(text: str) -> Any:
        if env_text is None or text is not env_text:
            return convert(text)
        if clears and inner is not None and not text.strip():
            return None
        try:
            if many:
                value: Any = [convert(p.strip()) for p in text.split(",") if p.strip()]
                bad = [v for v in value if choices is not None and v not in choices]
            else:
                value = convert(text)
                bad = [value] if choices is not None and value not in choices else []
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(
                f"environment variable {var}={text!r}: {exc}"
            ) from None
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(
                f"environment variable {var}={text!r}: not a valid {typed.__name__} value"
            ) from None
        if bad:
            allowed = ", ".join(map(str, choices or ()))
            raise argparse.ArgumentTypeError(
                f"environment variable {var}={text!r}: {bad[0]!r} is not one of {allowed}"
            )
        return value

    typed.__name__ = getattr(convert, "__name__", "value")
    return typed


def _bool_from_env(var: str, on: Any, off: Any) -> Callable[[str], Any]:
    def typed(text: str) -> Any:
        try:
            return on if parse_bool(text) else off
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"environment variable {var}: {exc}") from None

    return typed


def env_flag(
    parser: argparse.ArgumentParser,
    *flags: str,
    help: str,
    default: Any = None,
    env: str | None = None,
    fallback_env: Sequence[str] = (),
    no_env: str | None = None,
    secret: bool = False,
    show: str | None = None,
    group: Any = None,
    **kw: Any,
) -> argparse.Action:
    """Add an optional flag to ``parser`` (a :class:`ProgramParser`; into ``group`` when given)
    that reads ``KGRPC_<PROGRAM>_<FLAG>`` (``env``: another name after the prefix, or a whole
    ``KGRPC_...`` name) and shows its default and variable in ``--help`` (``show``: the
    default as text, when the value itself does not say it). Other keywords go to
    ``add_argument``. Returns the action; ``action.env_var`` is the variable ("" with
    ``no_env``)."""
    prefix = getattr(parser, "env_prefix", None)
    if prefix is None:
        raise TypeError(f"{parser.prog}: env_flag needs a kgrpc.cli_help.ProgramParser")
    long_flags = [f for f in flags if f.startswith("--")]
    if not long_flags:
        raise ValueError(f"{flags}: env_flag needs a --long flag")
    if env is None:
        var = env_var_of(prefix, long_flags[0])
    else:
        var = env if env.startswith("KGRPC_") else prefix + env
    environ = getattr(parser, "environ", None)
    environ = os.environ if environ is None else environ
    container = group if group is not None else parser
    kind = kw.pop("action", "store")
    required = bool(kw.pop("required", False))

    env_text: str | None = None
    if no_env is None:
        for name in (var, *fallback_env):
            if name in environ:
                env_text = environ[name]
                break
    if show is None:
        if kind in BOOL_ACTIONS:
            show = "false"  # the flag is off unless given
        elif required:
            show = "none, required"
        else:
            show = _show(default)
    if no_env is not None:
        where = f"none, {no_env}"
    else:
        where = var + "".join(f"; fallback {e}" for e in fallback_env)
    text = _escape(f"{help} (default: {show}) [env: {where}]")

    if kind in BOOL_ACTIONS:
        on, off = (True, False) if kind == "store_true" else (False, True)
        if default is None:
            default = off
        action = container.add_argument(*flags, action=kind, default=default, help=text, **kw)
        negated = ["--no-" + f[2:] for f in long_flags if not f.startswith("--no-")]
        if negated:  # (a --no-x flag is its own negation's opposite: nothing to add)
            container.add_argument(
                *negated,
                dest=action.dest,
                action="store_const",
                const=off,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
        if env_text is not None:
            action.default = env_text
            action.type = _bool_from_env(var, on, off)
    else:
        if kind not in ("store", "append"):
            raise ValueError(f"{flags}: env_flag takes store, append, store_true, store_false")
        many = kind == "append" or kw.get("nargs") in ("+", "*")
        if kind == "append":
            kind = _AppendFresh
        elif secret:
            if kind != "store":
                raise ValueError("secret=True needs a plain stored flag")
            kind = _SecretStore
        clears = default is None
        if env_text is not None:
            default = env_text
            required = False
        kw["type"] = _typed(
            kw.get("type"), env_text, var, many=many, choices=kw.get("choices"), clears=clears
        )
        action = container.add_argument(
            *flags, action=kind, default=default, required=required, help=text, **kw
        )
        if isinstance(action, _SecretStore):
            action.env_var = var
    action.env_var = "" if no_env is not None else var  # type: ignore[attr-defined]
    return action
