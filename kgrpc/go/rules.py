"""Rule sets: how a game is scored, which repetitions are forbidden, and whether suicide is legal.

A :class:`Rules` is a frozen value. Named presets (:data:`PRESETS`):

==============  ==========  ===========  =======
name            scoring     ko           suicide
==============  ==========  ===========  =======
chinese         area        simple       no      (the default)
japanese        territory   simple       no
tromp-taylor    area        positional   yes
aga             area        situational  no
==============  ==========  ===========  =======

On the wire a rule set is a ``kgrpc.v1.Rules`` message (``protos/kgrpc/v1/common.proto``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kgrpc.v1 import common_pb2

SCORINGS = ("area", "territory")
KO_RULES = ("simple", "positional", "situational")

_SCORING_TO_PROTO = {
    "area": common_pb2.SCORING_RULE_AREA,
    "territory": common_pb2.SCORING_RULE_TERRITORY,
}
_KO_TO_PROTO = {
    "simple": common_pb2.KO_RULE_SIMPLE,
    "positional": common_pb2.KO_RULE_POSITIONAL,
    "situational": common_pb2.KO_RULE_SITUATIONAL,
}
_SCORING_FROM_PROTO = {v: k for k, v in _SCORING_TO_PROTO.items()}
_KO_FROM_PROTO = {v: k for k, v in _KO_TO_PROTO.items()}


@dataclass(frozen=True)
class Rules:
    scoring: str = "area"
    ko: str = "simple"
    suicide: bool = False

    def __post_init__(self) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"unknown scoring {self.scoring!r}; expected one of {SCORINGS}")
        if self.ko not in KO_RULES:
            raise ValueError(f"unknown ko rule {self.ko!r}; expected one of {KO_RULES}")

    @property
    def superko(self) -> bool:
        return self.ko != "simple"

    @property
    def name(self) -> str | None:
        """The preset name this rule set matches, or None for a custom combination."""
        for preset_name, preset in PRESETS.items():
            if preset == self:
                return preset_name
        return None

    @classmethod
    def from_name(cls, name: str) -> Rules:
        try:
            return PRESETS[name.strip().lower()]
        except KeyError:
            raise ValueError(
                f"unknown rules {name!r}; known presets: {', '.join(PRESETS)}"
            ) from None

    def to_proto(self) -> common_pb2.Rules:
        return common_pb2.Rules(
            scoring=_SCORING_TO_PROTO[self.scoring],
            ko=_KO_TO_PROTO[self.ko],
            suicide_allowed=self.suicide,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.Rules) -> Rules:
        scoring = _SCORING_FROM_PROTO.get(msg.scoring)
        if scoring is None:
            raise ValueError(f"rules.scoring is unspecified or unknown (enum value {msg.scoring})")
        ko = _KO_FROM_PROTO.get(msg.ko)
        if ko is None:
            raise ValueError(f"rules.ko is unspecified or unknown (enum value {msg.ko})")
        return cls(scoring=scoring, ko=ko, suicide=bool(msg.suicide_allowed))

    def __str__(self) -> str:
        return self.name or f"{self.scoring}/{self.ko}/{'suicide' if self.suicide else 'nosuicide'}"


PRESETS: dict[str, Rules] = {
    "chinese": Rules("area", "simple", False),
    "japanese": Rules("territory", "simple", False),
    "tromp-taylor": Rules("area", "positional", True),
    "aga": Rules("area", "situational", False),
}


def preset_to_proto(name: str) -> common_pb2.Rules:
    """The wire form of the preset ``name`` (ValueError for an unknown name)."""
    return Rules.from_name(name).to_proto()


CHINESE = PRESETS["chinese"]
