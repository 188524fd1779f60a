"""Named settings of ``kgrpc-cluster`` (``--profile NAME``): one place for a tuned recipe.

A profile sets :class:`kgrpc.programs.cluster.options.ClusterConfig` fields and passes
further settings to the trainer (``trainer/config.py`` names) and to the coordinator
(``kgrpc/coordinator/config.py`` names). Flags given on the command line override the
profile, field by field (``--train KEY=VALUE`` and ``--coord KEY=VALUE`` key by key); the run
prints every setting it uses. docs/training.md ("Trainer recipe", "The learn9 profile") has
the reasoning behind each value.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    about: str
    cluster: Mapping[str, Any]  # ClusterConfig fields
    trainer: Mapping[str, Any] = field(default_factory=dict)  # kgrpc-train run settings
    coordinator: Mapping[str, Any] = field(default_factory=dict)  # coordinator settings


# The search recipe of the native search (docs/training.md, "Search recipe"): coordinator
# settings handed to workers with each self-play task. Forced playouts and the score utility
# are KataGo's values (also the coordinator's defaults, named here so the profile says what
# it runs); a fifth of the games open with raw-policy moves, so that a small net's self-play
# does not replay one opening.
LEARN9_SEARCH: Mapping[str, Any] = MappingProxyType(
    {
        "forced_playouts_k": 2.0,
        "score_utility_factor": 0.5,
        "opening_policy_prob": 0.2,
    }
)

# The Gumbel root search (docs/training.md, "Gumbel root search"): its policy target keeps
# improving on the prior with few simulations, where PUCT's visit counts teach little, so
# learn9 spends 32 visits on a full search and 8 on a cheap one (learn9-puct: 96 and 24), a
# third of the visits a move. Against the PUCT recipe on one machine, 40 minutes each, its net
# alone learned faster and with 800 visits the two were level (docs/training.md, "Learning
# speed"). Forced playouts do not apply to Gumbel (its own draws explore); the score utility
# and the raw-policy openings do.
LEARN9_GUMBEL: Mapping[str, Any] = MappingProxyType(
    {
        "gumbel": True,
        "gumbel_considered": 16,
        "cheap_visits": 8,
    }
)

_LEARN9_CLUSTER: Mapping[str, Any] = MappingProxyType(
    {
        "data_dir": "learn9-data",
        "board_size": 9,
        "blocks": 4,
        "channels": 32,
        "visits": 32,
        "workers": 1,
        "worker_inference": "local",
        "parallel_games": 32,
        "generations": 0,  # until --max-minutes
        "max_minutes": 120.0,
        "gating": False,
        "batch_size": 128,
        "learning_rate": 1e-3,
        "min_new_rows": 2500,
        "steps_per_generation": 400,
        "eval_games": 0,
        # The in-run ladder on a budget (docs/training.md, "The learn9 profile"): a release
        # every 10 minutes, 10 games against GNU Go level 1 at 32 visits, at nice 10, so the
        # curve is visible while the run goes at a few per cent of the CPU.
        "ladder_games": 10,
        "ladder_every_minutes": 10.0,
        "ladder_references": "gnugo-l1",
        "ladder_visits": 32,
        "final_ladder_games": 40,
        "eval_visits": 400,
        "int8": "auto",  # int8 self-play where the CPU multiplies int8 natively
    }
)

_LEARN9_TRAINER: Mapping[str, Any] = MappingProxyType(
    {
        "samples_per_row": 8.0,
        "window_min_rows": 25_000,
        "window_exponent": 0.75,
        "window_growth": 0.4,
        "lr_schedule": "constant",
        "lr_warmup_samples": 20_000,
        "ema_samples": 25_000,
        # The trainer's step in bf16 where the CPU has AMX (else fp32), channels-last: on a
        # 2-core AMX Xeon kgrpc-bench train ran 1.9-2.1x the samples/s, and a 40-minute
        # run's net alone was not shown weaker (docs/training.md, "Arithmetic of the step").
        "autocast": "auto",
        "channels_last": True,
    }
)

LEARN9 = Profile(
    name="learn9",
    about="9x9 from random weights on a 2-core CPU: Gumbel self-play at 32 visits (8 cheap); "
    "train for --max-minutes (120 is the target), rating a release every 10 minutes against "
    "GNU Go level 1 (10 games at 32 visits) as it goes; then rate the newest model against "
    "random play and GNU Go level 1 (40 games each)",
    cluster=_LEARN9_CLUSTER,
    trainer=_LEARN9_TRAINER,
    coordinator=MappingProxyType(
        {
            "full_search_prob": 0.25,
            **LEARN9_SEARCH,
            **LEARN9_GUMBEL,
        }
    ),
)

# learn9 with PUCT search at three times the visits: what learn9 was until the Gumbel recipe
# replaced it, kept so that the results measured with it (docs/results/learn9-2h/ and the
# PUCT arms in docs/training.md) can be run again.
LEARN9_PUCT = Profile(
    name="learn9-puct",
    about="learn9 with PUCT search: 96 visits a full search, 24 a cheap one (learn9's recipe "
    "before Gumbel: its 40-minute net alone was weaker, at 800 visits level: docs/training.md)",
    cluster=MappingProxyType({**_LEARN9_CLUSTER, "visits": 96}),
    trainer=_LEARN9_TRAINER,
    coordinator=MappingProxyType(
        {
            "full_search_prob": 0.25,
            "cheap_visits": 24,
            **LEARN9_SEARCH,
        }
    ),
)

PROFILES: Mapping[str, Profile] = MappingProxyType({p.name: p for p in (LEARN9, LEARN9_PUCT)})


def setting_text(value: Any) -> str:
    """A setting's value as a flag or an environment variable gives it (the settings loader
    parses text by the field's type)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_profile(p: Profile) -> str:
    """Several lines for ``--help``: what the profile is for and what it sets."""

    def block(title: str, text: str) -> str:
        return textwrap.fill(
            text, width=88, initial_indent=f"    {title}: ", subsequent_indent=" " * 6
        )

    def items(d: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={setting_text(v)}" for k, v in d.items())

    lines = [
        textwrap.fill(p.about, width=88, initial_indent=f"  {p.name}: ", subsequent_indent="    "),
        block("run", items(p.cluster)),
    ]
    if p.trainer:
        lines.append(block("trainer (--train)", items(p.trainer)))
    if p.coordinator:
        lines.append(block("coordinator (--coord)", items(p.coordinator)))
    return "\n".join(lines)
