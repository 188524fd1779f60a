"""One settings loader for every daemon: a config dataclass -> TOML keys, flags, environment.

A daemon's settings are one dataclass whose fields are made with :func:`setting` (the default
and a one-line help text, as field metadata). :class:`Settings` derives everything else from
it, under one convention (docs/operations.md, "Settings"):

* TOML key: the field name (``max_batch``; ``max-batch`` is read the same), at the top level
  of the file or in the program's table (``[worker]``; the table wins). Tables named after
  the other programs are skipped, so one file can serve a whole deployment.
* flag: ``--`` and the field name with dashes (``--max-batch``), plus a few older aliases
  (:func:`setting`'s ``flag``/``aliases``). A boolean takes ``--flag`` (true),
  ``--flag true|false`` or ``--no-flag``; a list takes ``a,b`` (or, where marked, the flag
  repeated). ``--help`` lists the flags by group (connection, search, storage, logging...):
  a field's ``group``, or that of the field before it, so a group is named once, at its
  first field; a program whose fields name no group lists them all together. A group of
  settings shared by several programs is a dataclass their configs derive from
  (``kgrpc.blobstore.settings.StoreSettings``), listed after the program's own.
* environment variable: ``KGRPC_<PROGRAM>_<FIELD>`` in upper case
  (``KGRPC_WORKER_MAX_BATCH``), for every field, tokens included (``KGRPC_WORKER_TOKEN``);
  ``KGRPC_<PROGRAM>_CONFIG`` names the TOML file.
* precedence: flag > environment variable > TOML file > default. Older variable names kept
  for compatibility (``fallback_env``, e.g. ``KGRPC_TOKEN``) are read last, below the file.

Values given as text (flags, environment, TOML strings) are parsed by the field's type:
booleans ``true/false/yes/no/on/off/1/0``, numbers, lists separated by commas, paths;
other TOML values must have the field's type. Every error is a :class:`SettingsError`
naming the setting and where its value came from; an unknown TOML key names the file and
the closest known keys. ``--help`` shows each flag's default and environment variable.

A program's flags that are not settings (``--log-level``, the subcommands' flags, the tools
``kgrpc-gtp``, ``kgrpc-eval``, ``kgrpc-cluster``, ``kgrpc-bench``) follow the same convention
through :mod:`kgrpc.cli_help`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

PROGRAM_TABLES = frozenset({"coordinator", "worker", "inference", "train"})
"""TOML tables of the programs: one program reads its own and skips the others'."""
# The group of the fields before the first that names one (setting(group=...)).
DEFAULT_GROUP = "general"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """A bad setting: the message names the key and where its value came from."""


def setting(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    flag: str | None = None,
    aliases: Sequence[str] = (),
    fallback_env: Sequence[str] = (),
    parse: Callable[[Any], Any] | None = None,
    show: str | Callable[[Any], str] | None = None,
    metavar: str | None = None,
    choices: Sequence[str] | None = None,
    repeat: bool = False,
    group: str | None = None,
) -> Any:
    """A config field (``dataclasses.field``) with what the loader needs in its metadata.

    ``help``: one line for ``--help``; ``flag``: the flag when it is not ``--field-name``;
    ``aliases``: more flags; ``fallback_env``: older variable names read below the TOML
    file; ``parse``: a parser for the value (text, or a TOML value) instead of the type's;
    ``show``: how ``--help`` shows the default (text or a function of it); ``repeat``: a list
    whose flag is given once per item instead of comma-separated; ``group``: the heading
    ``--help`` lists this flag and the fields after it under (until one names another).
    """
    meta = {
        "help": help,
        "flag": flag,
        "aliases": tuple(aliases),
        "fallback_env": tuple(fallback_env),
        "parse": parse,
        "show": show,
        "metavar": metavar,
        "choices": tuple(choices) if choices else None,
        "repeat": repeat,
        "group": group,
    }
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def parse_bool(text: str) -> bool:
    v = text.strip().lower()
    if v in TRUE_WORDS:
        return True
    if v in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


class _Mismatch(Exception):
    """A value of the wrong type; ``expected`` says what was wanted."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


Converter = Callable[[Any], Any]


def _scalar(kind: type) -> Converter:
    def convert(value: Any) -> Any:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str):
                try:
                    return parse_bool(value)
                except ValueError:
                    pass
            raise _Mismatch("true or false")
        if kind is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    pass
            raise _Mismatch("an integer")
        if kind is float:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value.strip())
                except ValueError:
                    pass
            raise _Mismatch("a number")
        if kind is Path:
            if isinstance(value, str | os.PathLike):
                return Path(value).expanduser()
            raise _Mismatch("a path")
        if kind is str:
            if isinstance(value, str | os.PathLike):
                return os.fspath(value)
            raise _Mismatch("a string")
        raise TypeError(f"settings of type {kind!r} need a parse= function")

    return convert


def _converter(hint: Any) -> tuple[Converter, Converter | None]:
    """(converter of a whole value, converter of one list item or None) for a type hint."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        conv, item = _converter(inner)

        def optional(value: Any) -> Any:
            if value is None or (isinstance(value, str) and not value.strip()):
                return None
            return conv(value)

        return optional, item
    if origin in (tuple, list):
        item = _scalar(args[0])
        container = tuple if origin is tuple else list

        def sequence(value: Any) -> Any:
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list | tuple):
                raise _Mismatch("a list")
            return container(item(v) for v in value)

        return sequence, item
    return _scalar(hint), None


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, list | tuple):
        return ",".join(_show(v) for v in value) if value else "none"
    return str(value)


@dataclass(frozen=True)
class Option:
    """One setting of a program: its key, flags, variables, help and parser."""

    name: str
    help: str
    flags: tuple[str, ...]
    env: str
    fallback_env: tuple[str, ...]
    default_text: str
    is_bool: bool
    repeat: bool
    metavar: str
    choices: tuple[str, ...] | None
    _convert: Converter
    _item: Converter | None
    _parse: Callable[[Any], Any] | None
    group: str = DEFAULT_GROUP

    def convert(self, value: Any, where: str) -> Any:
        """The typed value; :class:`SettingsError` naming the key and ``where`` otherwise."""
        if self._parse is not None:
            if not isinstance(value, str | list | tuple):
                return value  # already parsed (a Python caller)
            try:
                return self._parse(value)
            except (ValueError, TypeError) as exc:
                raise SettingsError(f"{where}: {self.name}: {exc}") from None
        try:
            return self._convert(value)
        except _Mismatch as exc:
            raise SettingsError(
                f"{where}: {self.name} must be {exc.expected}, got {value!r}"
            ) from None

    def flag_type(self, text: str) -> Any:
        """argparse ``type=``: a bad value is a usage error naming the flag."""
        try:
            if self.repeat and self._item is not None:
                return self._item(text)
            if self._parse is not None:
                return self._parse(text)
            return self._convert(text)
        except _Mismatch as exc:
            raise argparse.ArgumentTypeError(f"expected {exc.expected}, got {text!r}") from None
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    @property
    def help_text(self) -> str:
        env = self.env + "".join(f"; fallback {e}" for e in self.fallback_env)
        return f"{self.help} (default: {self.default_text}) [env: {env}]"


class Settings(Generic[T]):
    """The loader of one program's config dataclass ``cls``.

    ``program`` names the environment variables (``KGRPC_<PROGRAM>_...``); ``table`` is the
    program's TOML table (default: ``program``).
    """

    def __init__(self, cls: type[T], program: str, *, table: str | None = None) -> None:
        self.cls = cls
        self.program = program
        self.table = table or program
        self.env_prefix = f"KGRPC_{program.upper()}_"
        self.config_env = self.env_prefix + "CONFIG"
        hints = typing.get_type_hints(cls)
        defaults = cls() if _all_defaulted(cls) else None
        self.options: dict[str, Option] = {}
        group = DEFAULT_GROUP
        for f in _own_fields_first(cls):
            meta = f.metadata
            if "help" not in meta:
                raise TypeError(f"{cls.__name__}.{f.name}: make it with kgrpc.settings.setting()")
            group = meta.get("group") or group
            conv, item = _converter(hints[f.name])
            default = getattr(defaults, f.name) if defaults is not None else None
            show = meta.get("show")
            shown = show if isinstance(show, str) else show(default) if show else _show(default)
            flag = meta.get("flag") or "--" + f.name.replace("_", "-")
            is_bool = hints[f.name] is bool
            self.options[f.name] = Option(
                name=f.name,
                help=str(meta["help"]),
                flags=(flag, *meta.get("aliases", ())),
                env=self.env_prefix + f.name.upper(),
                fallback_env=tuple(meta.get("fallback_env", ())),
                default_text=shown,
                is_bool=is_bool,
                repeat=bool(meta.get("repeat")),
                metavar=meta.get("metavar") or ("true|false" if is_bool else f.name.upper()),
                choices=meta.get("choices"),
                _convert=conv,
                _item=item,
                _parse=meta.get("parse"),
                group=group,
            )
        # The --help headings, in the order of their first field.
        self.groups: tuple[str, ...] = tuple(dict.fromkeys(o.group for o in self.options.values()))

    # ------------------------------------------------------------------ command line
    def add_arguments(
        self, parser: argparse.ArgumentParser, *, config_flag: bool = True, skip: Iterable[str] = ()
    ) -> dict[str, Any]:
        """``--config`` (optional) and one flag per setting; a flag not given stays absent
        from the namespace, so it overrides nothing. With more than one group, each group's
        flags go into an argument group of that title. Returns group name -> where its
        flags went (the argument group, or ``parser`` itself), for a program's own flags."""
        if config_flag:
            parser.add_argument(
                "--config",
                metavar="FILE",
                default=None,
                help=_escape(
                    f"TOML settings file; environment variables and flags override it "
                    f"(default: none) [env: {self.config_env}]"
                ),
            )
        skipped = set(skip)
        containers: dict[str, Any] = {
            g: parser.add_argument_group(g) if len(self.groups) > 1 else parser for g in self.groups
        }
        for opt in self.options.values():
            if opt.name in skipped:
                continue
            into = containers[opt.group]
            kw: dict[str, Any] = {
                "dest": opt.name,
                "default": argparse.SUPPRESS,
                "help": _escape(opt.help_text),
                "metavar": opt.metavar,
            }
            if opt.is_bool:
                into.add_argument(*opt.flags, nargs="?", const=True, type=opt.flag_type, **kw)
                into.add_argument(
                    *("--no-" + f[2:] for f in opt.flags),
                    dest=opt.name,
                    action="store_const",
                    const=False,
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                )
            elif opt.repeat:
                into.add_argument(*opt.flags, action="append", type=opt.flag_type, **kw)
            else:
                into.add_argument(*opt.flags, type=opt.flag_type, choices=opt.choices, **kw)
        return containers

    def flag_values(self, args: argparse.Namespace | Mapping[str, Any]) -> dict[str, Any]:
        """The settings given as flags (other attributes of the namespace are ignored)."""
        given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
        return {k: v for k, v in given.items() if k in self.options and v is not None}

    def from_args(self, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> T:
        """The config of a command line: ``--config`` (or ``KGRPC_<PROGRAM>_CONFIG``), the
        environment (``os.environ`` unless given) and the flags in ``args``."""
        env = os.environ if env is None else env
        path = getattr(args, "config", None) or env.get(self.config_env) or None
        return self.load(toml_path=path, flags=self.flag_values(args), env=env)

    # ------------------------------------------------------------------ sources
    def load(
        self,
        *,
        toml_path: str | os.PathLike[str] | None = None,
        flags: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> T:
        """Defaults < TOML file < environment (only when ``env`` is given) < ``flags``
        (values given in Python or as text; None = not given)."""
        values: dict[str, Any] = {}
        if env is not None:
            values.update(self.read_env(env, fallback=True))
        if toml_path:
            values.update(self.read_toml(toml_path))
        if env is not None:
            values.update(self.read_env(env))
        for key, value in (flags or {}).items():
            if value is None:
                continue
            opt = self._option(key, "setting")
            values[opt.name] = opt.convert(value, opt.flags[0])
        return self.cls(**values)

    def read_env(self, env: Mapping[str, str], *, fallback: bool = False) -> dict[str, Any]:
        """Settings given in ``KGRPC_<PROGRAM>_<FIELD>`` variables (``fallback``: in the older
        names read below the TOML file instead)."""
        out: dict[str, Any] = {}
        for opt in self.options.values():
            for var in opt.fallback_env if fallback else (opt.env,):
                if var in env:
                    out[opt.name] = opt.convert(env[var], f"environment variable {var}")
                    break
        return out

    def read_toml(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The settings of a TOML file: its top-level keys, then the program's table."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise SettingsError(f"{p}: no such config file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{p}: unreadable config file: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{p}: not valid TOML: {exc}") from None
        entries = {
            k: v for k, v in data.items() if not (isinstance(v, dict) and k in PROGRAM_TABLES)
        }
        table = data.get(self.table)
        if isinstance(table, dict):
            entries.update(table)
        unknown = [k for k in entries if k.replace("-", "_") not in self.options]
        if unknown:
            raise SettingsError(self.unknown_keys_message(str(p), unknown))
        return {
            k.replace("-", "_"): self.options[k.replace("-", "_")].convert(v, str(p))
            for k, v in entries.items()
        }

    def unknown_keys_message(self, where: str, unknown: Sequence[str]) -> str:
        """``FILE: unknown keys [...] ('x': did you mean 'y'?)``, and every known key unless
        each unknown one has a close match."""
        names = sorted(self.options)
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key.replace("-", "_"), names, n=3, cutoff=0.6)
            if close:
                hints.append(f"{key!r}: did you mean {' or '.join(repr(c) for c in close)}?")
        text = f"{where}: unknown keys {sorted(unknown)!r}"
        if len(hints) == len(unknown):
            return text + f" ({'; '.join(hints)})"
        return (
            text + (f" ({'; '.join(hints)})" if hints else "") + f"; known keys: {', '.join(names)}"
        )

    def _option(self, key: str, where: str) -> Option:
        opt = self.options.get(key.replace("-", "_"))
        if opt is None:
            raise SettingsError(self.unknown_keys_message(where, [key]))
        return opt

    def env_var(self, name: str) -> str:
        """The environment variable of setting ``name``."""
        return self.options[name].env

    def secrets_given_as_flags(
        self, args: argparse.Namespace, names: Iterable[str] = ("token",)
    ) -> list[str]:
        """A :func:`secret_flag_warning` for each of the settings ``names`` that ``args``
        got as a flag (a program prints them at start)."""
        given = vars(args)
        return [
            secret_flag_warning(self.options[n].flags[0], self.options[n].env)
            for n in names
            if n in self.options and given.get(n) is not None
        ]


def secret_flag_warning(flag: str, env_var: str) -> str:
    """The warning for a secret (a token) given as a flag: every user of the machine sees
    command lines (``ps``), nobody sees another's environment."""
    return (
        f"warning: {flag} on the command line is visible to every user of this machine "
        f"(ps); set ${env_var} instead"
    )


def _own_fields_first(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of a config, those it declares before those of the settings groups it
    derives from (kgrpc.blobstore.settings.StoreSettings), which a dataclass lists first:
    ``--help`` shows a program's own settings first, a shared group after them. Told apart
    by the dataclasses it derives from, not by the class's ``__annotations__`` entry: from
    Python 3.14 (PEP 649) its ``__dict__`` holds one only when the module defining it has
    ``from __future__ import annotations``."""
    inherited = {
        f.name
        for base in cls.__mro__[1:]
        if dataclasses.is_dataclass(base)
        for f in dataclasses.fields(base)
    }
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return [f for f in fields if f.name not in inherited] + [
        f for f in fields if f.name in inherited
    ]


def _all_defaulted(cls: type) -> bool:
    return all(
        f.default is not MISSING or f.default_factory is not MISSING
        for f in dataclasses.fields(cls)
    )  # type: ignore[arg-type]


def _escape(text: str) -> str:
    return text.replace("%", "%%")  # argparse %-formats help strings
