"""kgrpc.settings: one loader for the four daemons' settings (TOML keys, flags, environment
variables ``KGRPC_<PROGRAM>_<FIELD>``), through each program's real parser."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inference import cli as inference_cli
from inference.config import SETTINGS as INFERENCE
from kgrpc.blobstore import S3Options
from kgrpc.blobstore.settings import StoreSettings
from kgrpc.coordinator import cli as coordinator_cli
from kgrpc.coordinator.config import SETTINGS as COORDINATOR
from kgrpc.coordinator.config import config_from_args
from kgrpc.settings import Settings, SettingsError
from kgrpc.worker import cli as worker_cli
from kgrpc.worker.config import SETTINGS as WORKER
from trainer import cli as trainer_cli
from trainer.config import SETTINGS as TRAINER


def _coordinator_parser() -> argparse.ArgumentParser:
    # The serve sub-command's own parser, as `kgrpc-coordinator serve --help` prints it.
    sub = coordinator_cli.build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return sub.choices["serve"]  # type: ignore[no-any-return]


def _trainer_parser() -> argparse.ArgumentParser:
    sub = trainer_cli.build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return sub.choices["run"]  # type: ignore[no-any-return]


# (settings, parser of the program's command line, its TOML table, a setting of each kind)
PROGRAMS: dict[str, tuple[Settings[Any], Callable[[], argparse.ArgumentParser], str]] = {
    "coordinator": (COORDINATOR, _coordinator_parser, "coordinator"),
    "worker": (WORKER, worker_cli.build_parser, "worker"),
    "inference": (INFERENCE, inference_cli.build_parser, "inference"),
    "trainer": (TRAINER, _trainer_parser, "train"),
}


def _help_text(parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")
    return re.sub(r"\s+", " ", parser.format_help())


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_shows_every_flags_default_and_variable(
    program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, parser, _ = PROGRAMS[program]
    text = _help_text(parser(), monkeypatch)
    assert "--config FILE TOML settings file" in text
    assert f"[env: KGRPC_{program.upper()}_CONFIG]" in text
    for f in dataclasses.fields(settings.cls):  # type: ignore[arg-type]
        opt = settings.options[f.name]
        assert opt.env == f"KGRPC_{program.upper()}_{f.name.upper()}"
        help_ = re.sub(r"\s+", " ", opt.help)
        # "--flag METAVAR, --alias METAVAR help (default: ...) [env: ...]"
        m = re.search(
            re.escape(opt.flags[0])
            + r"(?: [^ ,]+)?(?:, --[^ ,]+(?: [^ ,]+)?)* "
            + re.escape(help_)
            + r" \(default: ([^)]*)\) \[env: "
            + re.escape(opt.env),
            text,
        )
        assert m, (program, f.name)
        assert m.group(1) == opt.default_text and m.group(1)


def test_help_text_of_some_settings() -> None:
    assert COORDINATOR.options["curriculum"].help_text.endswith(
        "(default: 100000:9:200,500000:13:400,0:19:800) [env: KGRPC_COORDINATOR_CURRICULUM]"
    )
    assert WORKER.options["token"].help_text.endswith(
        "(default: '') [env: KGRPC_WORKER_TOKEN; fallback KGRPC_TOKEN]"
    )
    assert WORKER.options["spool_dir"].help_text.endswith(
        "(default: WORK_DIR/spool) [env: KGRPC_WORKER_SPOOL_DIR]"
    )
    assert INFERENCE.options["models"].flags == ("--model",)
    assert INFERENCE.options["auth_tokens"].env == "KGRPC_INFERENCE_AUTH_TOKENS"
    assert TRAINER.options["token"].env == "KGRPC_TRAINER_TOKEN"
    assert WORKER.options["status_interval_s"].flags == ("--status-interval-s", "--status-interval")


def test_the_s3_settings_are_one_group_of_the_coordinator_and_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ["store_endpoint", "store_region", "store_access_key_id", "store_secret_access_key"]
    assert [f.name for f in dataclasses.fields(StoreSettings)] == names
    for program in ("coordinator", "trainer"):
        settings, parser, _ = PROGRAMS[program]
        # The names users type are kept; the group is listed after the program's own.
        assert list(settings.options)[-4:] == names, program
        assert settings.groups[-1] == "object store (S3)"
        for name in names:
            opt = settings.options[name]
            assert opt.flags == ("--" + name.replace("_", "-"),)
            assert opt.env == f"KGRPC_{program.upper()}_{name.upper()}"
            assert opt.help == COORDINATOR.options[name].help  # declared once
        monkeypatch.setenv(settings.env_var("store_region"), "eu-west-3")
        cfg = settings.from_args(parser().parse_args(["--store-endpoint", "http://s3:8333"]))
        assert cfg.store_options() == S3Options(endpoint="http://s3:8333", region="eu-west-3")


def test_the_coordinator_warns_of_an_s3_secret_given_as_a_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As kgrpc-train run does for the same setting. A setting out of range stops the start
    # (exit 2) right after the warning, before anything listens.
    argv = ["serve", "--data-dir", str(tmp_path), "--max-heartbeats-per-s", "-1"]
    assert coordinator_cli.main([*argv, "--store-secret-access-key", "s3cr3t"]) == 2
    err = capsys.readouterr().err
    assert "warning: --store-secret-access-key on the command line" in err
    assert "KGRPC_COORDINATOR_STORE_SECRET_ACCESS_KEY" in err and "s3cr3t" not in err
    assert coordinator_cli.main(argv) == 2  # not given: no warning
    assert "warning" not in capsys.readouterr().err


def test_precedence_flag_over_env_over_file_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("positions_per_shard = 111\nmin_moves = 5\nmax_moves = 60\n")
    parser = coordinator_cli.build_parser()
    for var in ("POSITIONS_PER_SHARD", "MIN_MOVES", "MAX_MOVES", "KOMI", "CONFIG"):
        monkeypatch.delenv(f"KGRPC_COORDINATOR_{var}", raising=False)
    monkeypatch.setenv("KGRPC_COORDINATOR_MIN_MOVES", "7")
    monkeypatch.setenv("KGRPC_COORDINATOR_MAX_MOVES", "70")
    monkeypatch.setenv("KGRPC_COORDINATOR_KOMI", "6.5")
    args = parser.parse_args(["serve", "--config", str(toml), "--max-moves", "80"])
    cfg = config_from_args(args)
    assert cfg.positions_per_shard == 111  # file over default
    assert cfg.min_moves == 7  # environment over file
    assert cfg.max_moves == 80  # flag over environment and file
    assert cfg.komi == 6.5 and cfg.gating_games == 400  # environment over default; default
    # The file itself may come from the environment.
    monkeypatch.setenv("KGRPC_COORDINATOR_CONFIG", str(toml))
    assert config_from_args(parser.parse_args(["serve"])).positions_per_shard == 111


@pytest.mark.parametrize("program", PROGRAMS)
def test_env_variable_overrides_default_for_every_program(
    program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, parser, _ = PROGRAMS[program]
    values = {
        "coordinator": ("gating_games", "12", 12),
        "worker": ("parallel_games", "5", 5),
        "inference": ("max_batch", "128", 128),
        "trainer": ("batch_size", "32", 32),
    }
    name, text, want = values[program]
    monkeypatch.setenv(settings.env_var(name), text)
    assert getattr(settings.from_args(parser().parse_args([])), name) == want
    flag = settings.options[name].flags[0]
    assert getattr(settings.from_args(parser().parse_args([flag, "2"])), name) == 2


def test_lists_booleans_and_optionals_from_text(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"KGRPC_INFERENCE_MODELS": "a.onnx, b.onnx", "KGRPC_INFERENCE_AUTH_TOKENS": "t1,t2"}
    cfg = INFERENCE.load(env=env)
    assert cfg.models == ["a.onnx", "b.onnx"] and cfg.auth_tokens == ["t1", "t2"]
    args = inference_cli.build_parser().parse_args(["--model", "c.onnx", "--model", "d.onnx"])
    assert INFERENCE.load(flags=INFERENCE.flag_values(args), env=env).models == ["c.onnx", "d.onnx"]
    parser = _coordinator_parser()
    for argv, want in (
        (["--gating-sprt"], True),
        (["--gating-sprt", "false"], False),
        (["--no-gating-sprt"], False),
        (["--gating-sprt", "on"], True),
    ):
        assert COORDINATOR.flag_values(parser.parse_args(argv)) == {"gating_sprt": want}
    assert COORDINATOR.load(env={"KGRPC_COORDINATOR_GATING_SPRT": "yes"}).gating_sprt is True
    assert TRAINER.flag_values(_trainer_parser().parse_args(["--no-publish"])) == {"publish": False}
    assert WORKER.load(env={"KGRPC_WORKER_SEED": "9"}).seed == 9
    assert WORKER.load(env={"KGRPC_WORKER_SEED": ""}).seed is None
    assert WORKER.load(env={"KGRPC_WORKER_WORK_DIR": "~/w"}).work_dir == Path("~/w").expanduser()
    assert COORDINATOR.load(
        env={"KGRPC_COORDINATOR_ALLOWED_RULES": "chinese,japanese"}
    ).allowed_rules == ("chinese", "japanese")


def test_worker_token_from_old_variable_only_when_nothing_else_sets_it(tmp_path: Path) -> None:
    toml = tmp_path / "w.toml"
    toml.write_text('token = "from-file"\n')
    old = {"KGRPC_TOKEN": "old-name"}
    assert WORKER.load(env=old).token == "old-name"
    assert WORKER.load(toml_path=toml, env=old).token == "from-file"  # below the file
    both = {**old, "KGRPC_WORKER_TOKEN": "new-name"}
    assert WORKER.load(toml_path=toml, env=both).token == "new-name"  # the convention's name
    assert WORKER.load(toml_path=toml, flags={"token": "flag"}, env=both).token == "flag"
    # The command line: the token from the environment keeps it out of `ps`.
    args = worker_cli.build_parser().parse_args(["--coordinator", "h:1"])
    assert WORKER.from_args(args, env=old).token == "old-name"


@pytest.mark.parametrize("program", PROGRAMS)
def test_unknown_key_is_the_same_error_everywhere(program: str, tmp_path: Path) -> None:
    settings, _, table = PROGRAMS[program]
    close = {
        "coordinator": ("gating_game", "gating_games"),
        "worker": ("max_bach", "max_batch"),
        "inference": ("max_bach", "max_batch"),
        "trainer": ("batchsize", "batch_size"),
    }
    typo, right = close[program]
    toml = tmp_path / f"{program}.toml"
    toml.write_text(f"[{table}]\n{typo} = 1\n")
    with pytest.raises(SettingsError) as err:
        settings.read_toml(toml)
    text = str(err.value)
    # Key, file and close matches; the list of known keys only when nothing is close.
    assert text.startswith(
        f"{toml}: unknown keys ['{typo}'] ('{typo}': did you mean '{right}'"
    ) and text.endswith("?)"), text
    toml.write_text("zzz = 1\n")
    with pytest.raises(
        SettingsError, match=re.escape(f"{toml}: unknown keys ['zzz']; known keys: ")
    ):
        settings.read_toml(toml)


def test_type_errors_name_the_key_and_the_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = tmp_path / "i.toml"
    toml.write_text('max_batch = "many"\n')
    with pytest.raises(
        SettingsError, match=f"{re.escape(str(toml))}: max_batch must be an integer, got 'many'"
    ):
        INFERENCE.read_toml(toml)
    toml.write_text("listen = 5\n")
    with pytest.raises(SettingsError, match="listen must be a string, got 5"):
        INFERENCE.read_toml(toml)
    with pytest.raises(
        SettingsError,
        match="environment variable KGRPC_WORKER_QUIET: quiet must be true or false, got 'maybe'",
    ):
        WORKER.load(env={"KGRPC_WORKER_QUIET": "maybe"})
    with pytest.raises(
        SettingsError, match="KGRPC_COORDINATOR_CURRICULUM: curriculum: curriculum entry '9:9'"
    ):
        COORDINATOR.load(env={"KGRPC_COORDINATOR_CURRICULUM": "9:9"})
    # A flag: a usage error naming the flag.
    with pytest.raises(SystemExit) as exc:
        worker_cli.build_parser().parse_args(["--parallel-games", "lots"])
    assert exc.value.code == 2
    assert "argument --parallel-games: expected an integer, got 'lots'" in capsys.readouterr().err


def test_one_file_for_a_whole_deployment(tmp_path: Path) -> None:
    toml = tmp_path / "kgrpc.toml"
    toml.write_text(
        "max_batch = 16\n"
        '[coordinator]\nlisten = "0.0.0.0:1"\n'
        '[worker]\ncoordinator = "c:1"\nmax_batch = 8\n'
        '[inference]\nlisten = "0.0.0.0:2"\n'
        "[train]\nbatch_size = 4\n"
    )
    worker = WORKER.load(toml_path=toml)
    assert (worker.coordinator, worker.max_batch) == ("c:1", 8)  # its table wins
    assert INFERENCE.load(toml_path=toml).max_batch == 16  # top level
    assert INFERENCE.load(toml_path=toml).listen == "0.0.0.0:2"
    with pytest.raises(SettingsError, match=r"unknown keys \['max_batch'\]"):
        COORDINATOR.load(toml_path=toml)  # a top-level key is every program's
    toml.write_text('[coordinator]\nlisten = "0.0.0.0:1"\n[train]\nbatch_size = 4\n')
    assert COORDINATOR.load(toml_path=toml).listen == "0.0.0.0:1"
    assert TRAINER.load(toml_path=toml).batch_size == 4


def test_subcommands_still_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    assert (
        coordinator_cli.main(
            ["token", "create", "--data-dir", str(data), "--role", "worker", "--label", "ann"]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("kg")
    assert coordinator_cli.main(["token", "list", "--data-dir", str(data)]) == 0
    assert "ann" in capsys.readouterr().out
    args = coordinator_cli.build_parser().parse_args(["stats", "--coordinator", "h:1"])
    assert args.command == "stats"
    parser = trainer_cli.build_parser()
    for argv in (
        ["run", "--once", "--batch-size", "8"],
        ["init", "--board-size", "9", "--out", "x.onnx"],
        ["export", "--checkpoint", "c", "--out", "o"],
        ["publish", "m.onnx", "--coordinator", "h:1"],
    ):
        assert parser.parse_args(argv).command == argv[0]
