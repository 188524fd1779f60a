"""kgrpc-eval ladder on a directory of two tiny real models: CSV, Markdown, PNG, SGF files."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sgfmill import sgf as sgfmill_sgf

from kgrpc import elo
from kgrpc.programs.eval.ladder_models import discover_models, wall_origin
from kgrpc.programs.eval.ladder_record import LadderRecord
from kgrpc.programs.eval.report import read_ladder_csv

pytest.importorskip("onnxruntime")
pytest.importorskip("matplotlib")

FIRST = "kg-b1c8-s0-d0"
SECOND = "kg-b1c8-s120-d6000"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from trainer.export import init_model

    folder = tmp_path_factory.mktemp("run") / "models"
    for seed, name in enumerate((SECOND, FIRST)):  # file order is not training order
        init_model((5, 9), 1, 8, folder / f"{name}.onnx", name=name, seed=seed)
    (folder / "notes.txt").write_text("not a model")
    return folder


def run_ladder(models: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kgrpc.programs.eval",
            "ladder",
            "--models",
            str(models),
            "--games",
            "2",
            "--size",
            "5",
            "--komi",
            "0.5",
            "--visits",
            "4",
            "--parallel",
            "2",
            "--gnugo-levels",
            "",
            "--referee",
            "playouts",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_ladder_writes_csv_report_plot_and_games(models: Path, tmp_path: Path):
    out = tmp_path / "ladder"
    proc = run_ladder(models, out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(out / f"ladder.{x}") for x in ("csv", "md", "png")]
    records = read_ladder_csv(out / "ladder.csv")
    pairs = [(r.model, r.opponent) for r in records]
    assert pairs == [(FIRST, "random"), (SECOND, "random"), (SECOND, "first")]
    for r in records:
        assert r.games == r.wins + r.losses + r.draws == 2
        est = elo.elo_interval(r.wins, r.losses, r.draws)
        assert (r.elo, r.win_rate) == (pytest.approx(est.elo, abs=1e-3), est.rate)
        assert r.elo_low <= r.elo <= r.elo_high and r.win_low <= r.win_rate <= r.win_high
        assert r.visits == 4 and r.selfplay_games is None
        assert r.distinct_games is not None and 1 <= r.distinct_games <= 2
        match_dir = out / "matches" / f"{r.model}__vs__{r.opponent}"
        sgfs = sorted((match_dir / "games").glob("*.sgf"))
        assert len(sgfs) == 2
        results = []
        for path in sgfs:
            game = sgfmill_sgf.Sgf_game.from_bytes(path.read_bytes())
            assert game.get_size() == 5
            players = {game.get_player_name("b"), game.get_player_name("w")}
            assert players == {r.model, r.opponent}
            winner = game.get_winner()
            results.append(None if winner is None else game.get_player_name(winner))
        assert results.count(r.model) == r.wins and results.count(None) == r.draws
    steps = {r.model: r.training_steps for r in records}
    assert steps == {FIRST: 0, SECOND: 120}
    assert {r.model: r.training_rows for r in records} == {FIRST: 0, SECOND: 6000}
    report = (out / "ladder.md").read_text()
    assert "| model | steps | rows | self-play games | wall (h:mm) | random | first |" in report
    assert f"| {SECOND} | 120 | 6000 |" in report
    first_random = records[0]
    assert f"-{first_random.draws}, {first_random.distinct_games} distinct)" in report
    png = (out / "ladder.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    import matplotlib.image

    height, width = matplotlib.image.imread(str(out / "ladder.png")).shape[:2]
    assert width > height > 100
    # Run again: every match is read back, none replayed.
    again = run_ladder(models, out)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("(stored)") == 3 and "[1/2]" not in again.stderr
    assert read_ladder_csv(out / "ladder.csv") == records


def test_records_round_trip_through_csv(tmp_path: Path):
    from kgrpc.programs.eval.report import ladder_csv

    rec = LadderRecord(
        "kg-b1c8-s5-d9",
        "gnugo-l1",
        4,
        0,
        4,
        0,
        0.0,
        0.0,
        0.49,
        -338.0,
        float("-inf"),
        -7.0,
        5,
        9,
        None,
        12.5,
        100,
    )
    counted = dataclasses.replace(rec, opponent="random", distinct_games=3)
    path = tmp_path / "ladder.csv"
    path.write_text(ladder_csv([rec, counted]))
    assert read_ladder_csv(path) == [rec, counted]
    assert path.read_text().splitlines()[0].endswith(",visits,distinct_games")
    # A ladder.csv written before distinct games were counted: read, with them unknown.
    rows = list(csv.reader(io.StringIO(ladder_csv([counted]))))
    old = io.StringIO()
    csv.writer(old, lineterminator="\n").writerows(row[:-1] for row in rows)
    assert "distinct" not in old.getvalue()
    path.write_text(old.getvalue())
    assert read_ladder_csv(path) == [dataclasses.replace(counted, distinct_games=None)]
    path.write_text("model,elo\nx,1\n")
    with pytest.raises(ValueError, match="not a ladder CSV"):
        read_ladder_csv(path)


def test_report_and_final_ladder_say_how_many_games_were_distinct(tmp_path: Path):
    from kgrpc.programs.cluster.final_ladder import FinalLadder
    from kgrpc.programs.eval.curve import cell
    from kgrpc.programs.eval.ladder_models import Model
    from kgrpc.programs.eval.match import MatchSettings
    from kgrpc.programs.eval.report import markdown
    from kgrpc.rating import Rating

    model = Model(SECOND, tmp_path / f"{SECOND}.onnx", 120, 6000, 0.0, None)
    repeated = LadderRecord.make(model, "gnugo-l1", Rating.from_results(3, 1, 0), 0.0, 8, 2)
    older = LadderRecord.make(model, "random", Rating.from_results(4, 0, 0), 0.0, 8)
    text = markdown([repeated, older], MatchSettings(games=4, size=5))
    assert " (3-1-0, 2 distinct) |" in text and " (4-0-0, distinct not counted) |" in text
    assert "over 4 games (2 distinct), Elo" in text
    assert "over 4 games (distinct not counted), Elo" in text
    assert cell(repeated).endswith(" 3-1-0 (2 distinct)") and cell(older).endswith(" 4-0-0")
    # The cluster's final ladder prints ladder.md's table and best-model lines.
    out = tmp_path / "final-ladder"
    out.mkdir()
    (out / "ladder.md").write_text(text)
    results = FinalLadder(SECOND, out, gnugo=True).results()
    assert any(ln.startswith("- gnugo-l1: ") and "(2 distinct)" in ln for ln in results)
    assert any("(3-1-0, 2 distinct)" in ln for ln in results)


def test_models_of_a_directory_have_file_times_and_unknown_game_counts(
    models: Path, tmp_path: Path
):
    found = discover_models(models)
    assert [m.name for m in found] == [FIRST, SECOND]
    assert [m.selfplay_games for m in found] == [None, None]
    assert found[0].created == (models / f"{FIRST}.onnx").stat().st_mtime
    with pytest.raises(ValueError, match="no .onnx models"):
        discover_models(tmp_path)


def test_a_sidecar_gives_a_lone_model_its_run_facts(models: Path, tmp_path: Path):
    """The cluster's final ladder rates one copied model: its sidecar carries the run's
    self-play games and start, so the row's wall-clock time is the run's, not zero."""
    from kgrpc.programs.cluster.final_ladder import model_facts

    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / f"{SECOND}.onnx").write_bytes((models / f"{SECOND}.onnx").read_bytes())
    (lone / f"{SECOND}.json").write_bytes(model_facts(10_000.0, 16_176, 2_800.0))
    [model] = discover_models(lone)
    assert (model.created, model.selfplay_games, model.run_start) == (10_000.0, 16_176, 2_800.0)
    assert model.created - wall_origin([model]) == 7_200.0
    plain = discover_models(models)
    assert wall_origin(plain) == min(m.created for m in plain)  # without sidecars: file times
    (lone / f"{SECOND}.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="unreadable model facts"):
        discover_models(lone)


# ------------------------------------------------------------------ from a coordinator
LADDER_ARGS = [
    "--games",
    "2",
    "--size",
    "5",
    "--komi",
    "0.5",
    "--visits",
    "4",
    "--parallel",
    "2",
    "--gnugo-levels",
    "",
    "--referee",
    "playouts",
]


async def ladder_process(
    address: str, token: str, out: Path, *extra: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.programs.eval",
        "ladder",
        "--coordinator",
        address,
        "--token",
        token,
        *LADDER_ARGS,
        "--out",
        str(out),
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def ladder_from(address: str, token: str, out: Path) -> tuple[int, str, str]:
    proc = await ladder_process(address, token, out)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 600)
    return proc.returncode or 0, stdout.decode(), stderr.decode()


async def publish(coord, path: Path) -> None:  # type: ignore[no-untyped-def]
    from trainer.publish import publish_model

    await publish_model(coord.address, coord.trainer_token, path)


async def upload_games(coord, seeds: range) -> None:  # type: ignore[no-untyped-def]
    from kgrpc.coordinator.testing import upload_request
    from kgrpc.randgame import make_random_game
    from kgrpc.v1 import coordinator_pb2_grpc

    games = [make_random_game(9, seed=s) for s in seeds]
    await coord.store_tasks_for(games)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(iter([upload_request(games)]))
    assert resp.accepted == len(seeds)


async def list_ratings(coord) -> list:  # type: ignore[no-untyped-def]
    from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        return list((await stub.ListRatings(coordinator_pb2.ListRatingsRequest())).ratings)


@pytest.mark.slow  # plays real GTP matches through subprocess engines (~45 s)
async def test_ladder_takes_models_from_a_coordinator_and_reports_to_it(
    models: Path, tmp_path: Path, coordinator_factory
):  # type: ignore[no-untyped-def]
    coord = await coordinator_factory(gating_enabled=False)
    out = tmp_path / "ladder"
    # Nothing released yet: a clear refusal.
    code, _, err = await ladder_from(coord.address, coord.trainer_token, out)
    assert code == 2 and "has released no model" in err
    await upload_games(coord, range(2))
    await publish(coord, models / f"{FIRST}.onnx")
    await asyncio.sleep(0.01)
    await upload_games(coord, range(2, 3))
    await asyncio.sleep(0.01)
    await publish(coord, models / f"{SECOND}.onnx")

    # A worker token may not report: refused before any game is played.
    code, _, err = await ladder_from(coord.address, coord.worker_token, tmp_path / "denied")
    assert code == 1 and "PERMISSION_DENIED" in err and "trainer token" in err
    assert not (tmp_path / "denied" / "matches").exists()

    code, stdout, err = await ladder_from(coord.address, coord.trainer_token, out)
    assert code == 0, err
    assert stdout.split() == [str(out / f"ladder.{x}") for x in ("csv", "md", "png")]
    records = read_ladder_csv(out / "ladder.csv")
    assert [(r.model, r.opponent) for r in records] == [
        (FIRST, "random"),
        (SECOND, "random"),
        (SECOND, "first"),
    ]
    # Downloaded as workers do: the coordinator's bytes.
    for name in (FIRST, SECOND):
        assert (out / "models" / f"{name}.onnx").read_bytes() == (
            models / f"{name}.onnx"
        ).read_bytes()
    stored = await list_ratings(coord)  # ladder order: models, then opponents by name
    assert [(r.model, r.opponent) for r in stored] == [
        (FIRST, "random"),
        (SECOND, "first"),
        (SECOND, "random"),
    ]
    infos = {m.name: m for m in (await coord.app.list_models())}
    wall = (infos[SECOND].created_unix_ms - infos[FIRST].created_unix_ms) / 1000
    by_pair = {(r.model, r.opponent): r for r in stored}
    for rec in records:
        rating = by_pair[rec.model, rec.opponent]
        assert (rec.wins, rec.losses, rec.draws) == (rating.wins, rating.losses, rating.draws)
        assert rating.games == 2 and rating.visits == 4 and rating.board_size == 5
        assert rating.komi == 0.5
        # The row is the coordinator's: its game counts and times.
        assert rec.selfplay_games == rating.selfplay_games == {FIRST: 2, SECOND: 3}[rec.model]
        assert rec.wall_seconds == pytest.approx(rating.wall_seconds, abs=1e-3)
        assert rating.wall_seconds == pytest.approx(wall if rec.model == SECOND else 0.0)
        assert rec.elo == pytest.approx(rating.elo, abs=0.01)
        # The match's distinct games, reported to the coordinator and back in the row.
        match_dir = out / "matches" / f"{rec.model}__vs__{rec.opponent}"
        counted = json.loads((match_dir / "summary.json").read_text())["summary"]
        assert 1 <= rating.distinct_games == counted["distinct_games"] <= 2
        assert rec.distinct_games == rating.distinct_games
    report = (out / "ladder.md").read_text()
    assert f"| {SECOND} | 120 | 6000 | 3 |" in report

    # Again: read back, reported again, nothing new stored.
    code, _, err = await ladder_from(coord.address, coord.trainer_token, out)
    assert code == 0, err
    assert err.count("(stored)") == 3
    assert await list_ratings(coord) == stored


@pytest.mark.slow
async def test_follow_rates_each_new_release(models: Path, tmp_path: Path, coordinator_factory):  # type: ignore[no-untyped-def]
    from kgrpc.coordinator.testing import start_coordinator
    from trainer.export import init_model

    third = "kg-b1c8-s240-d12000"
    init_model((5, 9), 1, 8, tmp_path / f"{third}.onnx", name=third, seed=7)
    coord = await coordinator_factory(gating_enabled=False)
    await publish(coord, models / f"{FIRST}.onnx")
    proc = await ladder_process(
        coord.address, coord.trainer_token, tmp_path / "ladder", "--follow", "--no-random"
    )
    lines: list[str] = []
    restarted: list = []

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            lines.append(line.decode())

    reader = asyncio.ensure_future(read_stderr())

    async def until(what: str, cond) -> None:  # type: ignore[no-untyped-def]
        for _ in range(3000):
            assert proc.returncode is None, "".join(lines)
            if await cond():
                return
            await asyncio.sleep(0.1)
        pytest.fail(f"timed out waiting for {what}:\n{''.join(lines)}")

    async def rated() -> list[str]:
        return [r.model for r in await list_ratings(coord)]

    async def waiting() -> bool:
        return any("waiting for the next release" in line for line in lines)

    try:
        # The first model alone has no reference (--no-random): the ladder waits.
        await until("the wait for a second model", waiting)
        await publish(coord, models / f"{SECOND}.onnx")

        async def second_rated() -> bool:
            return await rated() == [SECOND]

        await until("the second model's rating", second_rated)
        await publish(coord, tmp_path / f"{third}.onnx")

        async def third_rated() -> bool:
            return await rated() == [SECOND, third]

        await until("the third model's rating", third_rated)

        # The coordinator goes away and comes back on the same address: the ladder waits it
        # out and rates the next release.
        address, base = coord.address, coord.data_dir.parent
        await coord.stop()
        await until("the outage to be noticed", lambda: _said(lines, "trying again in"))
        coord = await start_coordinator(base, gating_enabled=False, listen=address)
        restarted.append(coord)
        fourth = "kg-b1c8-s360-d18000"
        init_model((5, 9), 1, 8, tmp_path / f"{fourth}.onnx", name=fourth, seed=8)
        await publish(coord, tmp_path / f"{fourth}.onnx")

        async def fourth_rated() -> bool:
            return await rated() == [SECOND, third, fourth]

        await until("the fourth model's rating", fourth_rated)
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)
        await reader
        assert proc.returncode == 0, "".join(lines)
        assert "kgrpc-eval: stopped\n" in lines
        # Each pass rewrote the reports: the last one has both models.
        records = read_ladder_csv(tmp_path / "ladder" / "ladder.csv")
        assert [(r.model, r.opponent) for r in records] == [
            (SECOND, "first"),
            (third, "first"),
            (fourth, "first"),
        ]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        reader.cancel()
        for c in restarted:
            await c.stop()


async def _said(lines: list[str], text: str) -> bool:
    return any(text in line for line in lines)


def test_score_utility_factor_reaches_the_engines_the_stored_key_and_the_report(
    models: Path, tmp_path: Path
):
    from kgrpc.programs.eval.ladder import ModelSearch, _settings_key, model_engine
    from kgrpc.programs.eval.match import MatchSettings
    from kgrpc.programs.eval.report import markdown

    settings = MatchSettings(games=2, size=5)
    model = discover_models(models)[0]
    plain, scored = ModelSearch(40), ModelSearch(40, 0.5)
    cmd = model_engine(model, scored, settings).command
    assert cmd[cmd.index("--score-utility-factor") + 1] == "0.5"
    assert cmd[cmd.index("--visits") + 1] == "40"
    assert "--score-utility-factor" not in model_engine(model, plain, settings).command
    # Stored matches of one search are not read back for the other; keys of matches stored
    # before the setting existed (no such key) still match the plain search.
    assert _settings_key(settings, plain) != _settings_key(settings, scored)
    assert "score_utility_factor" not in _settings_key(settings, plain)
    record = LadderRecord.make(model, "random", elo_rating(), 0.0, 40)
    assert "40 visits per move (score utility 0.5)." in markdown([record], settings, 0.5)
    assert "40 visits per move." in markdown([record], settings)
    bad = subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.eval", "ladder", "--models", str(models)]
        + ["--games", "2", "--score-utility-factor", "-1", "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "--score-utility-factor" in bad.stderr, bad.stderr
    assert not (tmp_path / "x" / "matches").exists()


def test_gumbel_reaches_the_engines_and_the_stored_key(models: Path):
    from kgrpc.programs.eval.ladder import ModelSearch, _settings_key, model_engine
    from kgrpc.programs.eval.match import MatchSettings

    settings = MatchSettings(games=2, size=5)
    model = discover_models(models)[0]
    plain, gumbel = ModelSearch(40), ModelSearch(40, gumbel=True, gumbel_considered=8)
    cmd = model_engine(model, gumbel, settings).command
    assert "--gumbel" in cmd and cmd[cmd.index("--gumbel-considered") + 1] == "8"
    assert "--gumbel" not in model_engine(model, plain, settings).command
    assert _settings_key(settings, plain) != _settings_key(settings, gumbel)
    assert "gumbel_considered" not in _settings_key(settings, plain)


def elo_rating():
    from kgrpc.rating import Rating

    return Rating.from_results(1, 1, 0)
