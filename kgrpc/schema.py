"""The data schema: every count, version and layout of the network's input, of training
shards and of model files, defined once (docs/formats.md sections 2, 4 and 5).

Everything else imports these names; nothing else spells them out. ``N`` is the board size,
``B`` a batch of positions, ``R`` the rows of a shard, ``G`` its games.

Network input (section 2), version :data:`FEATURE_VERSION`: the registry
:data:`INPUT_FEATURES` names each plane and global, its meaning and count (every count below
derives from it); ``kgrpc/go/features.py`` computes them:

=============== ======== ============================ =============================================
name            dtype    shape                        note
=============== ======== ============================ =============================================
planes          bool     [B, NUM_PLANES, N, N]        float32 0/1 as the net's ``bin_input``
packed planes   uint8    [B, packed_row_bytes(N)]     ``np.packbits`` of each row, big bit order
globals         float32  [B, NUM_GLOBALS]             the net's ``global_input``
=============== ======== ============================ =============================================

Training shards (section 4), an ``.npz`` of format :data:`SHARD_FORMAT_VERSION`; per-row arrays
are :data:`SHARD_ROW_ARRAYS` (dtype and shape by board size), then :data:`SHARD_META_KEYS`:

=============== ======== ============================ =============================================
key             dtype    shape                        meaning
=============== ======== ============================ =============================================
states          uint8    [R, packed_row_bytes(N)]     packed input planes
globals         float32  [R, NUM_GLOBALS]             global features
policy          float32  [R, N*N+1]                   search policy target
value           float32  [R]                          outcome, mover's view (+1/-1/0)
score           float32  [R]                          final score, mover's view, komi included
ownership       int8     [R, N*N]                     final ownership, mover's view
move_number     int32    [R]                          0-based move index in its game
game_index      int32    [R]                          index of the row's game in game_ids
root_value      float32  [R]                          search root value (diagnostics)
game_ids        <U36     [G]                          game ids
board_size      int32    []                           N
komi            float32  []                           komi
rules           str      []                           rules preset name
format_version  int32    []                           SHARD_FORMAT_VERSION
feature_version int32    []                           FEATURE_VERSION of ``states`` and ``globals``;
                                                      absent in shards written before it was
                                                      recorded: those are version 1
=============== ======== ============================ =============================================

Model files (section 5): ONNX with inputs :data:`MODEL_INPUTS` (``bin_input`` float32
[B, NUM_PLANES, N, N], ``global_input`` float32 [B, NUM_GLOBALS]) and outputs
:data:`MODEL_OUTPUTS` (``policy`` float32 [B, N*N+1] logits, ``value`` [B] tanh, ``score`` [B]
points, ``ownership`` [B, N, N] tanh), batch and N dynamic; string metadata props
``kgrpc.<key>`` for each key of :data:`MODEL_META_KEYS` (:class:`ModelMetadata`). A model
without ``kgrpc.feature_version`` expects version 1. Optional keys: ``kgrpc.precision``
(:data:`MODEL_PRECISION_KEY`; fp32, fp16 or int8, names and file layout in kgrpc/precision.py;
absent = fp32), the parity figures of a parity-checked export ``kgrpc.parity_*``
(:data:`MODEL_PARITY_PREFIX`, trainer/parity.py) and, for int8, ``kgrpc.calibration``
(:data:`MODEL_CALIBRATION_KEY`).

A shard or a model of another feature version than this code's is refused where it is loaded,
published or evaluated (:func:`check_feature_version`): its numbers mean something else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from kgrpc.precision import FP32, check_precision

# ------------------------------------------------------------------ network input
FEATURE_VERSION = 1
"""Version of the input encoding (planes and globals); raise it with any change to either, and
record the new registry's digest in :data:`FEATURE_DIGESTS` (a test holds the two together)."""
LEGACY_FEATURE_VERSION = 1
"""The version of a shard or model that does not record one (written before it was recorded)."""


@dataclass(frozen=True)
class InputFeature:
    """One entry of the input registry: ``count`` consecutive planes (or globals) named
    ``name`` (the key code looks them up by), whose meaning docs/formats.md shows."""

    name: str
    meaning: str
    count: int = 1


@dataclass(frozen=True)
class InputFeatures:
    """The registry of the net's input: spatial planes and global features, in order. Every
    count, offset, the packed length and docs/formats.md's tables derive from it."""

    planes: tuple[InputFeature, ...]
    globals: tuple[InputFeature, ...]

    @property
    def num_planes(self) -> int:
        return sum(p.count for p in self.planes)

    @property
    def num_globals(self) -> int:
        return sum(g.count for g in self.globals)

    def plane(self, name: str) -> int:
        """Index of the first plane of entry ``name``."""
        return _offset(self.planes, name)

    def global_index(self, name: str) -> int:
        """Index of the first global of entry ``name``."""
        return _offset(self.globals, name)

    def packed_row_bytes(self, size: int) -> int:
        """Bytes of one position's packed planes: ``ceil(num_planes * N * N / 8)``."""
        return (self.num_planes * size * size + 7) // 8

    def digest(self) -> str:
        """What the feature version names: names and counts, in order (the meanings are prose:
        a change of what an entry computes is a change of its name or of the version)."""
        parts = [f"{kind}:{f.name}*{f.count}" for kind, entries in self._kinds() for f in entries]
        return hashlib.sha256(";".join(parts).encode()).hexdigest()[:16]

    def markdown(self) -> str:
        """docs/formats.md section 2's tables (``scripts/feature_tables.py`` writes them)."""
        lines = [
            f"Spatial planes, `bool [NUM_PLANES, N, N]` with NUM_PLANES = {self.num_planes} "
            f"(feature version {FEATURE_VERSION}):",
            "",
            "| plane | name | meaning |",
            "|---|---|---|",
            *(f"| {i} | `{f.name}` | {f.meaning} |" for i, f in _numbered(self.planes)),
            "",
            f"Global features, `float32 [NUM_GLOBALS]` with NUM_GLOBALS = {self.num_globals}:",
            "",
            "| index | name | meaning |",
            "|---|---|---|",
            *(f"| {i} | `{f.name}` | {f.meaning} |" for i, f in _numbered(self.globals)),
        ]
        return "\n".join(lines) + "\n"

    def _kinds(self) -> tuple[tuple[str, tuple[InputFeature, ...]], ...]:
        return (("plane", self.planes), ("global", self.globals))


def _offset(entries: tuple[InputFeature, ...], name: str) -> int:
    at = 0
    for f in entries:
        if f.name == name:
            return at
        at += f.count
    raise KeyError(f"no input feature named {name!r}")


def _numbered(entries: tuple[InputFeature, ...]) -> list[tuple[str, InputFeature]]:
    """(``"3, 4, 5"`` / ``"10..14"`` / ``"0"``, entry) for each entry."""
    out, at = [], 0
    for f in entries:
        idx = list(range(at, at + f.count))
        shown = ", ".join(map(str, idx)) if f.count <= 3 else f"{idx[0]}..{idx[-1]}"
        out.append((shown, f))
        at += f.count
    return out


INPUT_FEATURES = InputFeatures(
    planes=(
        InputFeature("on_board", "on board (all ones; lets convolutions see the edge)"),
        InputFeature("own_stones", "own stones"),
        InputFeature("opponent_stones", "opponent stones"),
        InputFeature(
            "own_liberties",
            "own stones in groups with exactly 1, exactly 2, 3 or more liberties",
            3,
        ),
        InputFeature(
            "opponent_liberties",
            "opponent stones in groups with exactly 1, exactly 2, 3 or more liberties",
            3,
        ),
        InputFeature(
            "ko_banned",
            "points where the player to move may not play because of ko (simple ko point, or "
            "superko-banned moves)",
        ),
        InputFeature(
            "history",
            "the last 5 moves: the first = the most recent move (by the opponent), the next = "
            "the one before, ...; passes leave the plane empty",
            5,
        ),
    ),
    globals=(
        InputFeature(
            "komi",
            "komi from the mover's side / 20 (white to move with komi 7.5 -> +0.375; "
            "black -> -0.375)",
        ),
        InputFeature("territory_scoring", "1 if territory scoring, else 0"),
        InputFeature("positional_superko", "1 if positional superko"),
        InputFeature("situational_superko", "1 if situational superko"),
        InputFeature("suicide_allowed", "1 if suicide is allowed"),
        InputFeature("last_move_pass", "1 if the last move was a pass"),
        InputFeature("second_last_move_pass", "1 if the move before the last was a pass"),
        InputFeature("board_size", "N / 19"),
    ),
)
"""The net's input, in order. Adding a plane: an entry here, its computation in
kgrpc/go/features.py and native/src/features.cpp, FEATURE_VERSION raised with its digest
recorded, ``scripts/feature_tables.py`` for docs/formats.md (docs/architecture.md)."""

FEATURE_DIGESTS: dict[int, str] = {1: "6862ff1cc8d274e1"}
"""Feature version -> :meth:`InputFeatures.digest` of the registry it names: a registry that
changed without a new version fails tests/test_feature_registry.py, which says what to do."""

NUM_PLANES = INPUT_FEATURES.num_planes
NUM_GLOBALS = INPUT_FEATURES.num_globals
HISTORY_PLANES = next(p.count for p in INPUT_FEATURES.planes if p.name == "history")


def check_feature_digest(
    features: InputFeatures = INPUT_FEATURES,
    version: int = FEATURE_VERSION,
    digests: Mapping[int, str] = FEATURE_DIGESTS,
) -> None:
    """ValueError saying what to do unless ``features`` is what ``version`` was recorded as."""
    found = features.digest()
    named = digests.get(version)
    if named == found:
        return
    what = f"the input registry (kgrpc/schema.py INPUT_FEATURES) has digest {found!r}"
    if named is None:  # a version raised, its digest not recorded yet
        raise ValueError(f"{what}: record it as FEATURE_DIGESTS[{version}]")
    raise ValueError(
        f"{what}, but FEATURE_VERSION {version} names {named!r}: a changed plane or global is "
        f"a new encoding, so raise FEATURE_VERSION to {max(digests) + 1} and record {found!r} "
        "for it in FEATURE_DIGESTS"
    )


def packed_row_bytes(size: int) -> int:
    """Bytes of one position's packed planes: ``ceil(NUM_PLANES * N * N / 8)``."""
    return INPUT_FEATURES.packed_row_bytes(size)


def policy_size(size: int) -> int:
    """Entries of a policy vector: every point, then pass (``N * N + 1``)."""
    return size * size + 1


class FeatureVersionError(ValueError):
    """A shard, model or request encodes positions in another feature version."""

    def __init__(self, what: str, version: int, expected: int = FEATURE_VERSION) -> None:
        shown = "0 (none given)" if version == 0 else str(version)
        super().__init__(
            f"{what}: feature version {shown}, but this kgrpc encodes positions as feature "
            f"version {expected} (docs/formats.md section 2): the inputs would mean something "
            f"else, so only shards and models of feature version {expected} can be used"
        )
        self.what = what
        self.version = version
        self.expected = expected


def check_feature_version(version: int, what: str) -> None:
    """Raise :class:`FeatureVersionError` unless ``version`` is :data:`FEATURE_VERSION`."""
    if version != FEATURE_VERSION:
        raise FeatureVersionError(what, version)


# ------------------------------------------------------------------ training shards
SHARD_FORMAT_VERSION = 1

Trailing = Callable[[int], tuple[int, ...]]
"""The shape of one row of an array, as a function of the board size N."""

SHARD_ROW_ARRAYS: dict[str, tuple[np.dtype, Trailing]] = {
    "states": (np.dtype(np.uint8), lambda n: (packed_row_bytes(n),)),
    "globals": (np.dtype(np.float32), lambda n: (NUM_GLOBALS,)),
    "policy": (np.dtype(np.float32), lambda n: (policy_size(n),)),
    "value": (np.dtype(np.float32), lambda n: ()),
    "score": (np.dtype(np.float32), lambda n: ()),
    "ownership": (np.dtype(np.int8), lambda n: (n * n,)),
    "move_number": (np.dtype(np.int32), lambda n: ()),
    "game_index": (np.dtype(np.int32), lambda n: ()),
    "root_value": (np.dtype(np.float32), lambda n: ()),
}
"""Per-row arrays of a shard: key -> (dtype, row shape by board size)."""
SHARD_META_KEYS = ("game_ids", "board_size", "komi", "rules", "format_version")
"""Whole-shard values every shard has."""
SHARD_FEATURE_VERSION_KEY = "feature_version"
"""Recorded by every shard written since; absent = :data:`LEGACY_FEATURE_VERSION`."""
GAME_ID_DTYPE = "<U36"

# ------------------------------------------------------------------ model files
MODEL_INPUTS = ("bin_input", "global_input")
MODEL_OUTPUTS = ("policy", "value", "score", "ownership")
MODEL_META_PREFIX = "kgrpc."
MODEL_META_KEYS = (
    "name",
    "blocks",
    "channels",
    "board_sizes",
    "feature_version",
    "training_steps",
    "training_rows",
)
"""Required in every model file (the coordinator's publish check refuses a file without one)."""
MODEL_PRECISION_KEY = "precision"
"""Optional (absent = fp32): the file's precision, which its file name must agree with."""
MODEL_PARITY_PREFIX = "parity_"
"""Optional: ``parity_top1``, ``parity_kl`` ... of a parity-checked export (trainer/parity.py)."""
MODEL_CALIBRATION_KEY = "calibration"
"""Optional, int8 files: which positions set the activation ranges."""
# Rank of each input and output; a fixed axis length where the contract has one (None: the
# batch, board and moves axes are dynamic). The coordinator's publish check holds files to it.
MODEL_INPUT_SHAPES: dict[str, tuple[int | None, ...]] = {
    "bin_input": (None, NUM_PLANES, None, None),
    "global_input": (None, NUM_GLOBALS),
}
MODEL_OUTPUT_RANKS = {"policy": 2, "value": 1, "score": 1, "ownership": 3}
MIN_BOARD_SIZE = 2
MAX_BOARD_SIZE = 19


def parse_board_sizes(text: str) -> tuple[int, ...]:
    """``"5,9"`` -> ``(5, 9)``; ValueError unless a non-empty list of sizes in 2..19."""
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ValueError(f"board_sizes {text!r} is not a comma-separated list of sizes") from None
    if not sizes or not all(MIN_BOARD_SIZE <= s <= MAX_BOARD_SIZE for s in sizes):
        raise ValueError(
            f"board_sizes {text!r}: sizes must be in {MIN_BOARD_SIZE}..{MAX_BOARD_SIZE}"
        )
    return sizes


def model_props(props: Mapping[str, str]) -> dict[str, str]:
    """The ``kgrpc.*`` entries of a model's metadata props, keys without the prefix."""
    n = len(MODEL_META_PREFIX)
    return {k[n:]: v for k, v in props.items() if k.startswith(MODEL_META_PREFIX)}


def model_feature_version(meta: Mapping[str, str], source: str) -> int:
    """The feature version a model's (prefix-less) metadata records; 1 when it records none."""
    raw = meta.get("feature_version")
    if raw is None:
        return LEGACY_FEATURE_VERSION
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"{source}: metadata {MODEL_META_PREFIX}feature_version is {raw!r}, not an integer"
        ) from None


def model_precision(meta: Mapping[str, str], source: str) -> str:
    """The precision a model's (prefix-less) metadata records; fp32 when it records none."""
    raw = meta.get(MODEL_PRECISION_KEY, FP32)
    try:
        return check_precision(raw)
    except ValueError as exc:
        raise ValueError(
            f"{source}: metadata {MODEL_META_PREFIX}{MODEL_PRECISION_KEY}: {exc}"
        ) from None


@dataclass(frozen=True)
class ModelMetadata:
    """A model file's ``kgrpc.*`` metadata props (all stored as strings)."""

    name: str
    blocks: int
    channels: int
    board_sizes: tuple[int, ...]
    feature_version: int = FEATURE_VERSION
    training_steps: int = 0
    training_rows: int = 0
    precision: str = FP32

    def to_props(self) -> dict[str, str]:
        """``{"kgrpc.name": ..., ...}`` in :data:`MODEL_META_KEYS` order, then
        ``kgrpc.precision``."""
        values = {
            "name": self.name,
            "blocks": str(self.blocks),
            "channels": str(self.channels),
            "board_sizes": ",".join(str(s) for s in self.board_sizes),
            "feature_version": str(self.feature_version),
            "training_steps": str(self.training_steps),
            "training_rows": str(self.training_rows),
            MODEL_PRECISION_KEY: check_precision(self.precision),
        }
        return {MODEL_META_PREFIX + k: values[k] for k in (*MODEL_META_KEYS, MODEL_PRECISION_KEY)}

    @classmethod
    def from_meta(cls, meta: Mapping[str, str], source: str) -> ModelMetadata:
        """From prefix-less metadata (see :func:`model_props`); ValueError naming ``source``
        when ``name``, ``blocks`` or ``channels`` is missing or a number is not one."""
        missing = [k for k in ("name", "blocks", "channels") if k not in meta]
        if missing:
            raise ValueError(
                f"{source}: not a kgrpc model (no {MODEL_META_PREFIX}"
                f"{f', {MODEL_META_PREFIX}'.join(missing)} metadata)"
            )
        try:
            sizes = meta.get("board_sizes", "")
            return cls(
                name=meta["name"],
                blocks=int(meta["blocks"]),
                channels=int(meta["channels"]),
                board_sizes=tuple(int(s) for s in sizes.split(",") if s.strip()),
                feature_version=model_feature_version(meta, source),
                training_steps=int(meta.get("training_steps", "0")),
                training_rows=int(meta.get("training_rows", "0")),
                precision=model_precision(meta, source),
            )
        except ValueError as exc:
            raise ValueError(f"{source}: bad kgrpc metadata {dict(meta)}: {exc}") from None
