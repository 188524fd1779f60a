"""The ladder as text: the table of `kgrpc-coordinator stats`, kgrpc-cluster's live line and
final summary, from the coordinator's Rating messages."""

from __future__ import annotations

import time
from pathlib import Path

from kgrpc import elo
from kgrpc.programs.cluster.options import ClusterConfig
from kgrpc.programs.cluster.run import Cluster
from kgrpc.programs.cluster.summary import summary_text
from kgrpc.programs.eval.curve import (
    TITLE,
    ladder_lines,
    newest_line,
    records_from_stats,
    summary_lines,
)
from kgrpc.programs.eval.referee import find_gnugo
from kgrpc.programs.eval.remote import (
    DEFAULT_FOLLOW_REFERENCES,
    follow_done,
    follow_references,
)
from kgrpc.rating import Rating
from kgrpc.v1 import common_pb2, coordinator_pb2

A, B = "kg-b1c8-s0-d0", "kg-b1c8-s300-d9000"


def rating(
    model: str,
    opponent: str,
    wins: int,
    losses: int,
    draws: int = 0,
    steps: int = 0,
    games: int = 0,
) -> coordinator_pb2.Rating:
    r = Rating.from_results(wins, losses, draws)
    return coordinator_pb2.Rating(
        model=model,
        opponent=opponent,
        games=r.games,
        wins=wins,
        losses=losses,
        draws=draws,
        win_rate=r.rate,
        win_low=r.rate_low,
        win_high=r.rate_high,
        elo=r.elo,
        elo_low=r.elo_low,
        elo_high=r.elo_high,
        training_steps=steps,
        selfplay_games=games,
        visits=16,
        board_size=9,
        komi=7.5,
    )


def stats() -> coordinator_pb2.Stats:
    s = coordinator_pb2.Stats(run="run_001", games_accepted=40)
    s.models.add(name=A, status=common_pb2.MODEL_STATUS_RELEASED, created_unix_ms=1)
    s.models.add(
        name=B,
        status=common_pb2.MODEL_STATUS_RELEASED,
        training_steps=300,
        created_unix_ms=2,
        released_unix_ms=3,
    )
    s.ratings.extend(
        [
            rating(A, "random", 1, 1),
            rating(B, "first", 3, 1, steps=300, games=40),
            rating(B, "random", 4, 0, steps=300, games=40),
        ]
    )
    return s


def test_table_has_a_line_per_model_and_a_column_per_opponent() -> None:
    lines = ladder_lines(records_from_stats(stats()))
    assert lines[0] == TITLE
    assert lines[1].split() == ["model", "steps", "games", "random", "first"]
    even, won = elo.elo_interval(1, 1, 0), elo.elo_interval(3, 1, 0)
    perfect = elo.elo_interval(4, 0, 0)
    assert lines[2].split() == [
        A,
        "0",
        "0",
        "+0",
        f"[{even.low:+.0f},{even.high:+.0f}]",
        "1-1-0",
        "-",
    ]
    assert lines[3].split() == [
        B,
        "300",
        "40",
        f"{perfect.elo:+.0f}",
        f"[{perfect.low:+.0f},+inf]",
        "4-0-0",
        f"{won.elo:+.0f}",
        f"[{won.low:+.0f},{won.high:+.0f}]",
        "3-1-0",
    ]
    # Columns line up: each opponent's cells start where its header does.
    at = lines[1].index("first")
    assert lines[3][at:].startswith(f"{won.elo:+.0f}")
    assert ladder_lines([]) == []


def test_newest_line() -> None:
    line = newest_line(records_from_stats(stats()))
    assert line.startswith(f"ladder of {B} (steps 300): first ")
    assert "random" in line and "4-0-0" in line and A not in line
    assert newest_line([]) == ""


def test_a_model_is_done_when_rated_against_each_reference_of_the_follower() -> None:
    s = stats()
    gnugo = bool(find_gnugo())
    default = DEFAULT_FOLLOW_REFERENCES
    assert follow_references(default, True) == {"random"} | ({"gnugo-l1"} if gnugo else set())
    assert follow_references(default, False) == follow_references(default, True) | {"first"}
    # A ladder of chosen references is done with those (learn9: GNU Go level 1 alone).
    assert follow_references(["gnugo-l1"], False) == ({"gnugo-l1"} if gnugo else set())
    assert follow_done(s, B, ["random"]) and follow_done(s, B, ["first"])
    assert follow_done(s, A) == (not gnugo)  # the first model: random (and GNU Go)
    assert follow_done(s, B) == (not gnugo)
    for model in (A, B):
        s.ratings.append(rating(model, "gnugo-l1", 0, 2))
    assert follow_done(s, A) and follow_done(s, B)
    s.ratings.append(rating(B, "leela", 0, 2))  # more than the follower plays: still done
    assert follow_done(s, B)
    del s.ratings[1]  # B against the first model
    assert not follow_done(s, B)


def test_summary_names_the_plot_when_it_exists(tmp_path: Path) -> None:
    records = records_from_stats(stats())
    assert summary_lines(records, tmp_path) == ladder_lines(records)
    (tmp_path / "ladder.png").write_bytes(b"\x89PNG")
    assert summary_lines(records, tmp_path)[-1] == f"plot      {tmp_path / 'ladder.png'}"
    assert summary_lines([], None) == ["ladder: no ratings reported"]


def test_cluster_live_view_and_summary_show_the_ladder(tmp_path: Path) -> None:
    cluster = Cluster(ClusterConfig(data_dir=str(tmp_path / "data"), ladder_games=2))
    cluster.snapshot.stats = stats()
    view = cluster.display.render(cluster.snapshot, "127.0.0.1:1", None)
    assert newest_line(records_from_stats(stats())) in view.splitlines()
    (tmp_path / "data" / "ladder").mkdir(parents=True)
    (tmp_path / "data" / "ladder" / "ladder.png").write_bytes(b"\x89PNG")
    text = summary_text(stats(), {}, cluster.root, cluster.logs, 1.0, ladder=True)
    for line in ladder_lines(records_from_stats(stats())):
        assert line in text.splitlines()
    assert f"plot      {tmp_path / 'data' / 'ladder' / 'ladder.png'}" in text

    # The loop is done only once the ladder has rated the newest release.
    done = Cluster(
        ClusterConfig(data_dir=str(tmp_path / "d2"), generations=1, workers=1, ladder_games=2)
    )
    s = stats()
    s.ratings.append(rating(B, "gnugo-l1", 0, 2))
    s.workers.add(
        worker_id="w1",
        last_heartbeat_unix_ms=int(time.time() * 1000),
        stats=coordinator_pb2.WorkerStats(current_model=B),
    )
    assert done._loop_done(s)
    del s.ratings[1]  # B not yet against the first model
    assert not done._loop_done(s)
    done.cfg.ladder_every_minutes = 10.0  # a ladder on a budget may skip the last release
    assert done._loop_done(s)
    done.cfg.ladder_every_minutes = 0.0
    done.cfg.ladder_games = 0  # without a ladder nobody waits for ratings
    assert done._loop_done(s)
