"""The networks kgrpc ships (``networks/``, docs/go-engine.md "A network to play"): short
names that ``kgrpc-gtp --model NAME`` loads, each checked against its sha256 before use.

``networks/networks.toml`` is the one list: a table per network, keyed by its short name::

    [kg9]
    file = "kg9-....onnx"        # beside networks.toml
    sha256 = "..."               # of that file, checked at every load
    board_size = 9
    made_by = "kgrpc-cluster ..." # the command that trained it
    report = "docs/results/..."  # its rating report in the source tree
    about = "..."                # one line for --help and errors

Where the list is looked for, first found wins: ``$KGRPC_NETWORKS`` (a directory), the source
checkout's ``networks/`` (an editable install or a run from the tree), and the data directory
a wheel installs it to (``share/kgrpc/networks`` under the environment's prefix, or the user
base for ``pip install --user``). The wheel carries the directory through pyproject.toml's
``[tool.setuptools.data-files]``: a package-data copy would need the files inside ``kgrpc/``
as well as under ``networks/``, two places for one file.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

LIST_FILE = "networks.toml"
ENV_DIR = "KGRPC_NETWORKS"
# The wheel's install location of networks/ (pyproject.toml, [tool.setuptools.data-files]).
DATA_SUBDIR = Path("share", "kgrpc", "networks")
_CHECKOUT_DIR = Path(__file__).resolve().parents[1] / "networks"


class NetworkError(ValueError):
    """A name that is no shipped network, or a shipped file that fails its check."""


@dataclass(frozen=True)
class ShippedNetwork:
    name: str
    path: Path
    sha256: str
    board_size: int
    made_by: str
    report: str
    about: str

    def describe(self) -> str:
        return f"{self.name} ({self.board_size}x{self.board_size}: {self.about})"


def search_dirs() -> list[Path]:
    """Where networks.toml is looked for, in order."""
    dirs: list[Path] = []
    if os.environ.get(ENV_DIR):
        dirs.append(Path(os.environ[ENV_DIR]))
    dirs.append(_CHECKOUT_DIR)
    for scheme in (None, f"{os.name}_user"):
        try:
            base = sysconfig.get_path("data", scheme) if scheme else sysconfig.get_path("data")
        except KeyError:  # no user scheme on this platform
            continue
        dirs.append(Path(base) / DATA_SUBDIR)
    return dirs


def list_dir() -> Path | None:
    """The first directory of :func:`search_dirs` holding a networks.toml, or None."""
    return next((d for d in search_dirs() if (d / LIST_FILE).is_file()), None)


def shipped() -> dict[str, ShippedNetwork]:
    """The shipped networks by short name (empty when no networks.toml is found)."""
    where = list_dir()
    if where is None:
        return {}
    listing = tomllib.loads((where / LIST_FILE).read_text(encoding="utf-8"))
    out: dict[str, ShippedNetwork] = {}
    for name, entry in listing.items():
        try:
            out[name] = ShippedNetwork(
                name=name,
                path=where / entry["file"],
                sha256=entry["sha256"].lower(),
                board_size=int(entry["board_size"]),
                made_by=entry.get("made_by", ""),
                report=entry.get("report", ""),
                about=entry.get("about", ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise NetworkError(f"{where / LIST_FILE}: entry [{name}] is malformed ({exc})") from exc
    return out


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_short_name(model: str) -> bool:
    """True for what could only be a shipped network's name: not 'none', not a path."""
    return (
        model != "none"
        and not model.endswith(".onnx")
        and os.sep not in model
        and not Path(model).exists()
    )


def resolve(model: str) -> str:
    """``--model``'s value as a file to load: a shipped network's name becomes its checked
    file; 'none' and paths pass through unchanged. Raises :class:`NetworkError` for an
    unknown name (listing the shipped ones) or a file whose sha256 differs from the list's."""
    if not is_short_name(model):
        return model
    networks = shipped()
    net = networks.get(model)
    if net is None:
        names = ", ".join(n.describe() for n in networks.values()) or "none found"
        raise NetworkError(
            f"--model {model!r} is neither an .onnx file nor a shipped network "
            f"(shipped: {names}; looked in {', '.join(map(str, search_dirs()))})"
        )
    if not net.path.is_file():
        raise NetworkError(f"shipped network {model!r}: {net.path} is missing; reinstall kgrpc")
    actual = file_sha256(net.path)
    if actual != net.sha256:
        raise NetworkError(
            f"shipped network {model!r}: {net.path} has sha256 {actual}, the list says "
            f"{net.sha256}; the file is damaged or replaced: reinstall kgrpc"
        )
    return str(net.path)
