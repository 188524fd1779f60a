"""Coordinator settings: every Config field documented in --help, boolean flags, TOML keys."""

from __future__ import annotations

import dataclasses
import re

import pytest

from kgrpc.coordinator import cli
from kgrpc.coordinator.config import Config, config_from
from kgrpc.coordinator.config_flags import flags_to_overrides, setting_help


def serve_help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # argparse breaks lines at hyphens otherwise
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--help"])
    assert exc.value.code == 0
    # the help column still wraps: compare with whitespace collapsed
    return re.sub(r"\s+", " ", capsys.readouterr().out)


def test_every_setting_has_help_text() -> None:
    missing = [f.name for f in dataclasses.fields(Config) if len(setting_help(f)) < 15]
    assert missing == []


def test_serve_help_explains_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = serve_help(capsys, monkeypatch)
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text
        assert re.sub(r"\s+", " ", setting_help(f)) in text, f.name
    assert (
        "seconds after which waiting games are written to a shard even if it is not full "
        "(default: 600.0)" in text
    )
    assert "--auth [true|false] require an access token on every call" in text
    assert "(default: true)" in text and "(default: 100000:9:200,500000:13:400,0:19:800)" in text


def test_boolean_flags_take_true_false() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        ["serve", "--auth", "false", "--gating-sprt", "--gating-enabled", "yes"]
    )
    assert flags_to_overrides(args) == {"auth": False, "gating_sprt": True, "gating_enabled": True}
    cfg = config_from(None, flags_to_overrides(args))
    assert (cfg.auth, cfg.gating_sprt, cfg.gating_enabled) == (False, True, True)
    assert flags_to_overrides(parser.parse_args(["serve", "--auth", "TRUE"])) == {"auth": True}


def test_bad_boolean_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--auth", "maybe"])
    assert exc.value.code == 2
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err


def test_toml_keys_unchanged_and_flags_override(tmp_path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        'auth = false\ngating_sprt = true\nflush_interval_s = 5\nallowed_rules = ["chinese", '
        '"japanese"]\n'
    )
    cfg = config_from(str(toml), {"flush_interval_s": "7.5"})
    assert (cfg.auth, cfg.gating_sprt, cfg.flush_interval_s, cfg.allowed_rules) == (
        False,
        True,
        7.5,
        ("chinese", "japanese"),
    )
    toml.write_text("no_such_setting = 1\n")
    with pytest.raises(ValueError, match="no_such_setting"):
        config_from(str(toml))
