"""The GTP commands Sabaki, Lizzie and KaTrain send beyond GTP 2's basics (issue 28: 11 of 29
were refused), against the real kgrpc-gtp over pipes: rules, handicap, komi, SGF, cache, and
every key of kata-analyze / lz-analyze and the *genmove_analyze commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrpc.go.coords import from_gtp
from kgrpc.programs.gtp import setup
from kgrpc.sgf import parse_sgf
from tests.test_gtp_extensions import Engine, parse_kata

NEW_COMMANDS = (
    "kata-set-rules",
    "kata-set-rule",
    "kata-get-rules",
    "kgs-rules",
    "fixed_handicap",
    "place_free_handicap",
    "set_free_handicap",
    "genmove_analyze",
    "lz-genmove_analyze",
    "kata-genmove_analyze",
    "get_komi",
    "printsgf",
    "clear_cache",
)


@pytest.fixture
def random_engine():
    engine = Engine("--model", "none", "--seed", "1")
    yield engine
    if engine.proc.poll() is None:
        engine.proc.kill()
        engine.proc.wait()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnxruntime")
    from trainer.export import init_model

    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    init_model((5, 7, 9), 1, 8, path)
    return path


def test_the_gui_commands_are_known(random_engine: Engine) -> None:
    listed = random_engine.ok("list_commands").split("\n")
    for command in NEW_COMMANDS:
        assert command in listed
        assert random_engine.ok(f"known_command {command}") == "true"


def test_rules_commands(random_engine: Engine) -> None:
    e = random_engine
    assert json.loads(e.ok("kata-get-rules")) == {
        "friendlyPassOk": False,
        "hasButton": False,
        "ko": "SIMPLE",
        "scoring": "AREA",
        "suicide": False,
        "tax": "NONE",
        "whiteHandicapBonus": "0",
    }
    e.ok("kata-set-rules japanese")
    assert json.loads(e.ok("kata-get-rules"))["scoring"] == "TERRITORY"
    assert "rules japanese" in e.ok("showboard")
    e.ok('kata-set-rules {"ko":"POSITIONAL","scoring":"AREA","suicide":true,"tax":"NONE"}')
    assert "rules tromp-taylor" in e.ok("showboard")
    e.ok("kata-set-rule ko SITUATIONAL")
    rules = json.loads(e.ok("kata-get-rules"))
    assert (rules["ko"], rules["suicide"]) == ("SITUATIONAL", True)
    e.ok("kgs-rules chinese")  # kgsGtp's chinese is KataGo's chinese-kgs: positional superko
    rules = json.loads(e.ok("kata-get-rules"))
    assert (rules["ko"], rules["scoring"], rules["suicide"]) == ("POSITIONAL", "AREA", False)
    e.ok("kgs-rules japanese")
    assert "rules japanese" in e.ok("showboard")
    for bad, why in (
        ("kata-set-rules aga-button", "button Go is not supported"),
        ("kata-set-rules ing", "unknown rules 'ing'"),
        ('kata-set-rules {"ko": "SUPER"}', "ko must be one of"),
        ("kata-set-rule scoring COUNT", "scoring must be AREA or TERRITORY"),
        ("kgs-rules ing", "kgs-rules takes one of chinese"),
    ):
        ok, text = e.send(bad)
        assert not ok and why in text, (bad, text)
    assert "rules japanese" in e.ok("showboard"), "a refused change leaves the rules alone"


def test_komi_and_cache(random_engine: Engine) -> None:
    assert random_engine.ok("get_komi") == "7.5"
    random_engine.ok("komi 0.5")
    assert random_engine.ok("get_komi") == "0.5"
    assert random_engine.ok("clear_cache") == ""


def test_fixed_and_free_handicap(random_engine: Engine, tmp_path: Path) -> None:
    e = random_engine
    assert e.ok("fixed_handicap 4") == "D4 Q16 D16 Q4"
    assert "white to play" in e.ok("showboard")
    ok, text = e.send("fixed_handicap 2")
    assert not ok and text == "board not empty"
    e.ok("boardsize 9")
    ok, text = e.send("fixed_handicap 10")
    assert not ok and "invalid number of stones (2 to 9 on 9x9)" in text
    nine = ["C3", "G7", "C7", "G3", "C5", "G5", "E3", "E7", "E5"]
    assert e.ok("fixed_handicap 9").split() == nine
    e.ok("clear_board")
    free = e.ok("place_free_handicap 12").split()
    assert len(set(free)) == 12
    e.ok("boardsize 9")
    for bad, why in (
        ("set_free_handicap C3", "2 or more stones"),
        ("set_free_handicap C3 C3", "given twice"),
        ("set_free_handicap C3 pass", "a pass"),
        ("set_free_handicap C3 Z9", "invalid vertex"),
    ):
        ok, text = e.send(bad)
        assert not ok and why in text, (bad, text)
    e.ok("set_free_handicap C3 G7")
    e.ok("play w E5")
    e.ok("play w D5")  # out of turn, as GTP allows
    sgf = e.ok("printsgf")
    assert "HA[2]" in sgf and "AB[cg][gc]" in sgf and "PL[W]" in sgf
    game = parse_sgf(sgf)
    assert sorted(game.setup_black) == sorted(from_gtp(v, 9) for v in ("C3", "G7"))
    assert game.moves == [(-1, from_gtp("E5", 9)), (-1, from_gtp("D5", 9))]
    path = tmp_path / "game.sgf"
    assert e.ok(f"printsgf {path}") == ""
    assert parse_sgf(path.read_text()).moves == game.moves
    # The saved game loads back into the engine as the same position.
    e.ok("clear_board")
    assert e.ok(f"loadsgf {path}") == "black"
    assert "HA[" not in e.ok("printsgf") and e.ok("printsgf").count(";W[") == 2


def test_handicap_placements_follow_the_gtp_specification() -> None:
    def v(size: int, stones: int) -> str:
        return setup.vertices(setup.fixed_handicap(size, stones), size)

    assert v(19, 9) == "D4 Q16 D16 Q4 D10 Q10 K4 K16 K10"
    assert v(19, 5) == "D4 Q16 D16 Q4 K10"
    assert v(13, 3) == "D4 K10 D10"
    assert v(8, 4) == "C3 F6 C6 F3"
    with pytest.raises(setup.SetupError, match="2 to 4 on 8x8"):
        setup.fixed_handicap(8, 5)
    with pytest.raises(setup.SetupError, match="none on 5x5"):
        setup.fixed_handicap(5, 2)
    assert len(set(setup.free_handicap(5, 24))) == 24


def test_genmove_analyze_without_a_model_just_plays(random_engine: Engine) -> None:
    e = random_engine
    e.ok("boardsize 7")
    for command in ("genmove_analyze b 10", "kata-genmove_analyze w 10", "lz-genmove_analyze b"):
        e.write(command)
        ok, lines = e.read_answer()
        assert ok and lines[0] == "=" and len(lines) == 2, lines
        assert lines[1].startswith("play ")
    assert e.ok("printsgf").count(";") == 4


def _analysis(e: Engine, command: str, lines_wanted: int = 2) -> list[str]:
    """Run an analysis until it has sent ``lines_wanted`` lines, end it with the next command
    (as GUIs do); its lines."""
    assert e.proc.stdout
    e.write(command)
    assert e.proc.stdout.readline() == "=\n"
    lines = [e.proc.stdout.readline().rstrip("\n") for _ in range(lines_wanted)]
    e.write("name")
    while (line := e.proc.stdout.readline()) != "\n":
        assert line, "engine closed stdout"
        lines.append(line.rstrip("\n"))
    assert e.read_answer() == (True, ["= kgrpc"])
    assert all(x.startswith("info ") for x in lines), lines
    return lines


@pytest.mark.slow
def test_every_analysis_key_the_guis_send(model: Path) -> None:
    e = Engine("--model", str(model), "--size", "7", "--visits", "64", "--seed", "3")
    try:
        e.ok("play b D4")
        keys = (
            "ownership true rootInfo true pvVisits true pvEdgeVisits true ownershipStdev true "
            "movesOwnership true minmoves 3 maxmoves 6 avoid w A1,B2 1 allow b C3,E5 1 "
            "interval 10"
        )
        line = _analysis(e, f"kata-analyze w {keys}")[-1]
        root_part = line.split(" rootInfo ")[1].split(" ownership ")[0].split()
        root = dict(zip(root_part[::2], root_part[1::2], strict=True))
        assert root["currentPlayer"] == "W" and int(root["visits"]) >= 1
        assert 0.0 <= float(root["winrate"]) <= 1.0
        entries, ownership = parse_kata(line.split(" rootInfo ")[0], 7)
        assert ownership is None  # it comes after rootInfo
        own = [float(x) for x in line.split(" ownership ")[1].split()]
        assert len(own) == 49 and all(-1 <= x <= 1 for x in own)
        assert 3 <= len(entries) <= 6
        for entry in entries:
            pv = entry["pv"]
            assert isinstance(pv, list)
            at = pv.index("pvVisits")
            moves, rest = pv[:at], pv[at + 1 :]
            counts = rest[: rest.index("pvEdgeVisits")]
            assert len(counts) == len(moves) and counts == rest[rest.index("pvEdgeVisits") + 1 :]
            assert int(counts[0]) == int(str(entry["visits"]))
            assert entry["move"] not in ("A1", "B2"), "avoided moves are not listed"
        # lz-analyze takes the same keys; ownership is accepted and ignored there.
        lz = _analysis(e, "lz-analyze b 10 ownership true avoid b D5 1 minmoves 2")[-1]
        lz_entries, lz_own = parse_kata(lz, 7)
        assert lz_own is None and all(x["move"] != "D5" for x in lz_entries)
        assert 0 <= int(str(lz_entries[0]["winrate"])) <= 10000
        # allow: only those moves are listed.
        allowed = _analysis(e, "kata-analyze b 10 allow b C3,E5 1 minmoves 2")[-1]
        assert {x["move"] for x in parse_kata(allowed, 7)[0]} <= {"C3", "E5"}
        # kata-genmove_analyze: info lines while it searches, then the move, which is played.
        e.write("kata-genmove_analyze w 5 rootInfo true")
        ok, lines = e.read_answer()
        assert ok and lines[0] == "=" and lines[-1].startswith("play ")
        assert all(x.startswith("info ") for x in lines[1:-1]) and len(lines) >= 3
        move = lines[-1].split()[1]
        assert e.ok("printsgf").endswith(f";W[{_sgf(move, 7)}])")
        e.write("genmove_analyze b 5")  # Leela Zero's form: winrates in 0..10000
        ok, lines = e.read_answer()
        assert ok and lines[-1].startswith("play ") and "winrate" in lines[1]
        assert e.ok("clear_cache") == ""
        ok, text = e.send("kata-analyze b 10 avoid b D5")
        assert not ok and "avoid takes a colour, vertices and a depth" in text
        e.quit()
    finally:
        if e.proc.poll() is None:
            e.proc.kill()
            e.proc.wait()


def _sgf(vertex: str, size: int) -> str:
    from kgrpc.go.coords import to_sgf

    return to_sgf(from_gtp(vertex, size), size)
