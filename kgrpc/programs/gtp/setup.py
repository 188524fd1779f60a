"""What GUIs set up before a game: the rules (``kata-set-rules``, ``kata-get-rules``,
``kgs-rules``) and handicap stones (``fixed_handicap``, ``place_free_handicap``).

Rules: kgrpc's board knows scoring (area, territory), ko (simple, positional, situational) and
suicide. KataGo's shorthand names and JSON rules map onto those three; ``tax`` and
``whiteHandicapBonus`` are accepted and have no effect (kgrpc's score is the board's count
plus the komi the controller sets, whatever the handicap), and button Go is refused.

Handicap: the fixed placements of the GTP 2 specification (section 4.1.1): corner star points
on the third line below 13x13 and the fourth line from 13x13 up, then sides and centre;
up to 9 stones on odd boards from 9x9, 4 on even boards and on 7x7, none below 7x7.
"""

from __future__ import annotations

import json

from kgrpc.go.coords import to_gtp
from kgrpc.go.rules import PRESETS, Rules


class SetupError(ValueError):
    """A rules or handicap request that cannot be honoured (the GTP error text)."""


# KataGo's shorthand names -> (scoring, ko, suicide) (KataGo's docs/GTP_Extensions.md).
KATAGO_RULES: dict[str, tuple[str, str, bool]] = {
    "tromp-taylor": ("area", "positional", True),
    "chinese": ("area", "simple", False),
    "chinese-ogs": ("area", "positional", False),
    "chinese-kgs": ("area", "positional", False),
    "japanese": ("territory", "simple", False),
    "korean": ("territory", "simple", False),
    "stone-scoring": ("area", "simple", False),
    "aga": ("area", "situational", False),
    "bga": ("area", "situational", False),
    "new-zealand": ("area", "situational", True),
}
# kgsGtp's names (``kgs-rules``); its chinese is KataGo's chinese-kgs.
KGS_RULES = {
    "chinese": "chinese-kgs",
    "aga": "aga",
    "japanese": "japanese",
    "new_zealand": "new-zealand",
}
_KO_NAMES = {"SIMPLE": "simple", "POSITIONAL": "positional", "SITUATIONAL": "situational"}
_SCORING_NAMES = {"AREA": "area", "TERRITORY": "territory"}
_TAXES = ("NONE", "SEKI", "ALL")
_BONUSES = ("0", "N-1", "N")


def rules_from_katago(text: str) -> Rules:
    """A KataGo shorthand name (or one of kgrpc's presets), or KataGo's JSON rules object."""
    text = text.strip()
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SetupError(f"rules JSON does not parse: {exc}") from None
        if not isinstance(fields, dict):
            raise SetupError("rules JSON must be an object")
        rules = CHINESE_LIKE
        for key, value in fields.items():
            rules = set_rule(rules, key, value)
        return rules
    key = text.lower().replace("_", "-")
    if key in KATAGO_RULES:
        return Rules(*KATAGO_RULES[key])
    if key in PRESETS:
        return PRESETS[key]
    if key == "aga-button":
        raise SetupError("button Go is not supported")
    known = sorted({*KATAGO_RULES, *PRESETS})
    raise SetupError(f"unknown rules {text!r}; known: {', '.join(known)}")


def set_rule(rules: Rules, key: str, value: object) -> Rules:
    """``rules`` with one of KataGo's rule fields set (``kata-set-rule KEY VALUE``)."""
    text = str(value).strip()
    upper = text.upper()
    if key == "ko":
        if upper not in _KO_NAMES:
            raise SetupError(f"ko must be one of {', '.join(_KO_NAMES)}, got {text!r}")
        return Rules(rules.scoring, _KO_NAMES[upper], rules.suicide)
    if key == "scoring":
        if upper not in _SCORING_NAMES:
            raise SetupError(f"scoring must be AREA or TERRITORY, got {text!r}")
        return Rules(_SCORING_NAMES[upper], rules.ko, rules.suicide)
    if key in ("suicide", "multiStoneSuicideLegal"):
        return Rules(rules.scoring, rules.ko, _boolean(key, value))
    if key == "hasButton":
        if _boolean(key, value):
            raise SetupError("button Go is not supported")
        return rules
    if key == "friendlyPassOk":
        _boolean(key, value)
        return rules
    if key == "tax":
        if upper not in _TAXES:
            raise SetupError(f"tax must be one of {', '.join(_TAXES)}, got {text!r}")
        return rules
    if key == "whiteHandicapBonus":
        if upper not in _BONUSES:
            raise SetupError(f"whiteHandicapBonus must be one of {', '.join(_BONUSES)}")
        return rules
    raise SetupError(f"unknown rule {key!r}")


def _boolean(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise SetupError(f"{key} must be true or false, got {value!r}")
    return text == "true"


def rules_to_katago(rules: Rules) -> str:
    """``kata-get-rules``: KataGo's JSON fields for ``rules`` (no tax beyond what territory
    scoring implies, no handicap bonus, no button)."""
    return json.dumps(
        {
            "friendlyPassOk": False,
            "hasButton": False,
            "ko": rules.ko.upper(),
            "scoring": rules.scoring.upper(),
            "suicide": rules.suicide,
            "tax": "SEKI" if rules.scoring == "territory" else "NONE",
            "whiteHandicapBonus": "0",
        },
        separators=(",", ":"),
        sort_keys=True,
    )


CHINESE_LIKE = Rules("area", "simple", False)


# ---------------------------------------------------------------------------------- handicap
def max_fixed_handicap(size: int) -> int:
    if size < 7:
        return 0
    return 4 if size % 2 == 0 or size == 7 else 9


def fixed_handicap(size: int, stones: int) -> list[int]:
    """The points of ``stones`` handicap stones at the GTP specification's fixed places."""
    most = max_fixed_handicap(size)
    if not 2 <= stones <= most:
        raise SetupError(
            "invalid number of stones"
            + (f" (2 to {most} on {size}x{size})" if most else f" (none on {size}x{size})")
        )
    line = 2 if size < 13 else 3  # third or fourth line, 0-based
    low, high, mid = line, size - 1 - line, size // 2

    def point(col: int, row_from_bottom: int) -> int:
        return (size - 1 - row_from_bottom) * size + col

    corners = [point(low, low), point(high, high), point(low, high), point(high, low)]
    sides_lr = [point(low, mid), point(high, mid)]
    sides_tb = [point(mid, low), point(mid, high)]
    centre = [point(mid, mid)]
    layouts = {
        2: corners[:2],
        3: corners[:3],
        4: corners,
        5: corners + centre,
        6: corners + sides_lr,
        7: corners + sides_lr + centre,
        8: corners + sides_lr + sides_tb,
        9: corners + sides_lr + sides_tb + centre,
    }
    return layouts[stones]


def free_handicap(size: int, stones: int) -> list[int]:
    """``place_free_handicap``: the fixed places while they last, then the points farthest
    from every stone placed so far (off the first two lines where the board allows), so the
    stones spread evenly whatever their number."""
    if not 2 <= stones <= size * size - 1:
        raise SetupError(f"invalid number of stones (2 to {size * size - 1} on {size}x{size})")
    most = max_fixed_handicap(size)
    placed = fixed_handicap(size, min(stones, most)) if most else []
    edge = 2 if size >= 7 else 0
    inner = [
        p
        for p in range(size * size)
        if edge <= p // size < size - edge and edge <= p % size < size - edge
    ]
    candidates = inner if len(inner) >= stones else list(range(size * size))
    while len(placed) < stones:
        free = [p for p in candidates if p not in placed]

        def distance(p: int) -> int:
            r, c = divmod(p, size)
            if not placed:
                return -abs(r - size // 2) - abs(c - size // 2)
            return min(max(abs(r - q // size), abs(c - q % size)) for q in placed)

        placed.append(max(free, key=lambda p: (distance(p), -p)))
    return placed


def vertices(points: list[int], size: int) -> str:
    return " ".join(to_gtp(p, size) for p in points)
