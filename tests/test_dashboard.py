"""The coordinator's dashboard: JSON API and headers over real HTTP, then the page itself in
a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
import pytest_asyncio
from sgfmill import sgf as sgfmill_sgf

from kgrpc.coordinator.testing import upload_requests
from kgrpc.coordinator.web.server import CSP, HTTP_FILE
from kgrpc.go.rules import PRESETS
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import (
    FIRST,
    SECOND,
    get_json,
    get_text,
    http_url,
    populate,
    publish,
)
from tests.model_files import model_bytes

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"
GATED = dict(http_listen="127.0.0.1:0", gating_games=2, match_chunk_games=2)


# ---------------------------------------------------------------------- JSON and headers
async def test_api_answers_with_numbers_and_security_headers(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATED)
    fed = await populate(coord)
    base = http_url(coord)
    assert (coord.data_dir / HTTP_FILE).read_text().strip() == base + "/"

    o = await get_json(base + "/api/overview")
    assert o["games"] == {"received": 6, "accepted": 6, "rejected": 0, "duplicate": 0}
    assert o["positions"]["accepted"] == fed.positions
    assert isinstance(o["positions"]["accepted"], int)
    assert o["workers_online"] == 1 and o["current_model"]["name"] == SECOND
    assert o["games_per_s"] > 0 and isinstance(o["games_per_s"], float)
    assert o["sgf_games"] == {"selfplay": 6, "gating": 2}

    elo = await get_json(base + "/api/elo")
    points = {p["model"]: p["elo"] for s in elo["series"] for p in s["points"]}
    assert points[FIRST] == 0.0 and points[SECOND] > 20

    models = {m["name"]: m for m in await get_json(base + "/api/models")}
    g = models[SECOND]["gating"]
    assert (g["wins"], g["losses"], g["draws"], g["reference"]) == (2, 0, 0, FIRST)
    assert g["elo_high"] is None  # +inf after a clean sweep: null, not invalid JSON
    assert models[FIRST]["gating"] is None

    (user,) = await get_json(base + "/api/contributors")
    # Credited to the token's label; the worker's --username ("alice") is not shown by
    # default (display_names off).
    assert (user["username"], user["games"], user["positions"], user["share"]) == (
        "test worker",
        6,
        fed.positions,
        1.0,
    )
    assert user["display_names"] == []

    (match,) = await get_json(base + "/api/matches")
    assert match["decision"] == "released" and match["games"] == 2

    games = (await get_json(base + "/api/games"))["games"]
    assert [x["kind"] for x in games] == ["gating"] * 2 + ["selfplay"] * 6
    assert [x["seq"] for x in games] == sorted((x["seq"] for x in games), reverse=True)
    older = (await get_json(f"{base}/api/games?limit=3&before={games[2]['seq']}"))["games"]
    assert [x["game_id"] for x in older] == [x["game_id"] for x in games[3:6]]
    only = (await get_json(base + "/api/games?kind=gating"))["games"]
    assert {x["game_id"] for x in only} == {r.game_id for r in fed.gating}

    view = await get_json(f"{base}/api/game?id={fed.selfplay[0].game_id}")
    assert [m["point"] for m in view["moves"]] == [
        None if p == 81 else p for p in fed.selfplay[0].moves
    ]
    assert view["moves"][0]["value"] == pytest.approx(
        fed.selfplay[0].targets[0].root_value, abs=1e-4
    )

    status, text, headers = await get_text(base + view["sgf"])
    assert status == 200 and "attachment" in headers["Content-Disposition"]
    game = sgfmill_sgf.Sgf_game.from_string(text)
    assert len(game.get_main_sequence()) == len(fed.selfplay[0].moves) + 1

    for path in ("/", "/api/overview", "/static/app.js", "/api/game?id=nope", "/sgf?id=nope"):
        status, _, headers = await get_text(base + path)
        assert headers["Content-Security-Policy"] == CSP, path
        assert headers["X-Content-Type-Options"] == "nosniff"
    assert "script-src 'self'" in CSP and "unsafe" not in CSP

    status, body, _ = await get_text(base + "/api/game?id=nope")
    assert status == 404 and "nope" in body
    status, body, _ = await get_text(base + "/api/games?limit=5000")
    assert status == 400 and "limit" in body
    status, body, _ = await get_text(base + "/api/games?kind=weird")
    assert status == 400
    for bad in ("/static/../server.py", "/static/%2e%2e/server.py", "/models/nope-b1c1-s0-d0.onnx"):
        status, _, _ = await get_text(base + bad)
        assert status in (403, 404), bad
    async with aiohttp.ClientSession() as s, s.get(f"{base}/models/{FIRST}.onnx") as r:
        assert r.status == 200 and await r.read() == model_bytes(FIRST)


async def test_ladder_ratings_are_series_of_the_elo_graph(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATED)
    await populate(coord)
    sent = {
        (FIRST, "random"): (3, 1, 0),
        (SECOND, "random"): (4, 0, 0),
        (SECOND, "first"): (2, 1, 1),
    }
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        stored = {}
        for (model, opponent), (w, lo, d) in sent.items():
            out = await stub.ReportRating(
                coordinator_pb2.ReportRatingRequest(
                    model=model,
                    opponent=opponent,
                    wins=w,
                    losses=lo,
                    draws=d,
                    visits=8,
                    board_size=9,
                    komi=7.5,
                    rules=PRESETS["chinese"].to_proto(),
                )
            )
            stored[model, opponent] = out.rating
    series = {s["key"]: s for s in (await get_json(http_url(coord) + "/api/elo"))["series"]}
    assert {"gating-released", "ladder-first", "ladder-random"} <= set(series)
    random_points = series["ladder-random"]["points"]
    assert [p["model"] for p in random_points] == [FIRST, SECOND]  # by model creation
    assert random_points[0]["t_ms"] == stored[FIRST, "random"].model_created_unix_ms
    assert random_points[0]["elo"] == pytest.approx(stored[FIRST, "random"].elo)
    assert random_points[1]["elo"] == pytest.approx(stored[SECOND, "random"].elo)
    assert random_points[1]["elo"] > random_points[0]["elo"]
    (first,) = series["ladder-first"]["points"]
    assert first["model"] == SECOND
    assert first["elo"] == pytest.approx(stored[SECOND, "first"].elo)
    assert series["ladder-first"]["label"] == "ladder: Elo vs first"


async def test_dashboard_is_off_by_default_and_local_unless_told(coordinator_factory) -> None:
    coord = await coordinator_factory()
    assert coord.app.dashboard is None
    assert not (coord.data_dir / HTTP_FILE).exists()
    on = await coordinator_factory(http_listen="0")
    assert on.app.dashboard.host == "127.0.0.1" and on.app.dashboard.port > 0
    with pytest.raises(OSError):  # the address is taken: the coordinator does not start
        await coordinator_factory(http_listen=f"127.0.0.1:{on.app.dashboard.port}")


# ---------------------------------------------------------------------- the browser
def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(
            f"{why}: the browser tests must run under CI (make test installs both)", pytrace=False
        )
    pytest.skip(why)


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[object]:
    try:
        from playwright.async_api import async_playwright
    except ImportError as exc:
        _missing(f"playwright is not installed ({exc})")
    if not Path(CHROMIUM).exists():
        _missing(f"{CHROMIUM} is missing (apt-get install chromium)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


async def open_page(browser, url: str, page_name: str):  # type: ignore[no-untyped-def]
    page = await browser.new_page(accept_downloads=True)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(url)
    await page.wait_for_selector(f'body[data-loaded="{page_name}"]')
    return page, errors


@pytest.mark.slow
@pytest.mark.browser
async def test_dashboard_pages_in_chromium(coordinator_factory, browser, tmp_path) -> None:
    coord = await coordinator_factory(**GATED)
    fed = await populate(coord)
    base = http_url(coord)

    page, errors = await open_page(browser, base + "/", "overview")
    assert (await page.text_content("#card-games .value")).strip() == "6"
    assert (await page.text_content("#card-positions .value")).strip() == f"{fed.positions:,}"
    assert (await page.text_content("#card-workers .value")).strip() == "1"
    assert SECOND in await page.text_content("#card-model")

    await page.click('nav a[data-page="elo"]')
    await page.wait_for_selector('body[data-loaded="elo"]')
    chart = page.locator("#elo-chart")
    assert await chart.get_attribute("data-points") == "2"  # one point per rated model
    assert await page.locator("#elo-chart canvas").count() >= 1
    rows = page.locator("#elo-points tbody tr")
    assert await rows.count() == 2
    assert {(await rows.nth(i).locator("td").nth(1).text_content()) for i in range(2)} == {
        FIRST,
        SECOND,
    }

    await page.click('nav a[data-page="contributors"]')
    await page.wait_for_selector('body[data-loaded="contributors"]')
    first_row = page.locator("#contributors tbody tr").first
    # Credited to the token's label, as /api/contributors says (display names off).
    assert await first_row.locator("td").nth(0).text_content() == "test worker"
    assert await first_row.locator("td").nth(1).text_content() == "6"

    await page.click('nav a[data-page="models"]')
    await page.wait_for_selector('body[data-loaded="models"]')
    assert "2-0-0" in await page.text_content("#models tbody")

    await page.click('nav a[data-page="matches"]')
    await page.wait_for_selector('body[data-loaded="matches"]')
    assert "released" in await page.text_content("#matches tbody")

    await page.click('nav a[data-page="games"]')
    await page.wait_for_selector('body[data-loaded="games"]')
    assert await page.locator("#games tbody tr").count() == 8
    game = fed.selfplay[0]
    await page.click(f'#games a[href="#game={game.game_id}"]')
    await page.wait_for_selector('body[data-loaded="game"]')
    assert await page.text_content("#game-title") == game.game_id
    board = page.locator("#board")
    assert await board.get_attribute("data-move") == "0"
    assert await board.get_attribute("data-stones") == "0"
    await page.click("#next")
    assert await board.get_attribute("data-move") == "1"
    assert await page.locator("#board circle.stone").count() == (0 if game.moves[0] == 81 else 1)
    for _ in range(9):
        await page.click("#next")
    assert await board.get_attribute("data-move") == "10"
    assert "move 10 of" in await page.text_content("#move-label")
    assert "root value" in await page.text_content("#move-value")
    await page.click("#prev")
    assert await board.get_attribute("data-move") == "9"
    await page.click("#last")
    assert await board.get_attribute("data-move") == str(len(game.moves))
    await page.keyboard.press("Home")
    assert await board.get_attribute("data-move") == "0"

    async with page.expect_download() as info:
        await page.click("#sgf-link")
    download = await info.value
    saved = tmp_path / "got.sgf"
    await download.save_as(saved)
    parsed = sgfmill_sgf.Sgf_game.from_bytes(saved.read_bytes())
    assert parsed.get_size() == 9
    assert len(parsed.get_main_sequence()) == len(game.moves) + 1
    assert parsed.get_root().get("PB") == FIRST
    assert errors == []


@pytest.mark.slow
@pytest.mark.browser
async def test_hostile_names_are_shown_as_text(coordinator_factory, browser) -> None:
    coord = await coordinator_factory(**GATED, display_names=True)
    fed = await populate(coord, username=HOSTILE, hostname=HOSTILE)
    # A self-play game whose model name is markup too (workers choose what they send).
    evil = make_random_game(9, seed=77, worker_id=fed.worker_id, model=HOSTILE)
    await coord.store_tasks_for([evil])
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        assert (await stub.UploadGames(iter(upload_requests([evil])))).accepted == 1
    await coord.app.archive.drain()
    base = http_url(coord)
    page, errors = await open_page(browser, base + "/#contributors", "contributors")
    cell = page.locator("#contributors tbody tr td").first
    assert await cell.text_content() == f"test worker ({HOSTILE})"  # the label, the name
    assert await page.locator("main img").count() == 0

    await page.goto(base + "/#games")
    await page.wait_for_selector('body[data-loaded="games"]')
    assert HOSTILE in await page.text_content("#games tbody")
    await page.goto(f"{base}/#game={evil.game_id}")
    await page.wait_for_selector('body[data-loaded="game"]')
    assert HOSTILE in await page.text_content("#game-info")
    assert await page.locator("main img").count() == 0
    assert await page.title() == "kgrpc dashboard"  # the onerror handler never ran
    assert errors == []
    # The hostile model name never became a path: its games sit under a hashed directory.
    assert not any("<" in str(p) for p in (coord.data_dir / "sgf").rglob("*"))


async def test_games_rpc_and_kept_sgf_files(coordinator_factory) -> None:
    coord = await coordinator_factory(gating_games=2, match_chunk_games=2)
    fed = await populate(coord)
    files = sorted((coord.data_dir / "sgf").rglob("*.sgf"))
    assert len(files) == 8
    assert {p.parent.name for p in files} == {"selfplay", "gating"}
    assert {p.parent.parent.name for p in files if p.parent.name == "gating"} == {SECOND}
    by_id = {r.game_id: r for r in fed.selfplay + fed.gating}
    for path in files:
        game = sgfmill_sgf.Sgf_game.from_bytes(path.read_bytes())
        rec = by_id[path.stem]
        root = game.get_root()
        assert (root.get("PB"), root.get("PW")) == (rec.black_model, rec.white_model)
        assert root.get("KM") == rec.komi and root.get("RU") == "Chinese"
        assert root.get("RE")[0] in "BW"
        nodes = game.get_main_sequence()[1:]
        assert len(nodes) == len(rec.moves)
        assert "root value" in nodes[0].get("C")
        assert float(nodes[0].get("KGV")) == pytest.approx(rec.targets[0].root_value, abs=1e-4)

    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        page1 = await stub.ListGames(coordinator_pb2.ListGamesRequest(limit=5))
        page2 = await stub.ListGames(
            coordinator_pb2.ListGamesRequest(limit=5, before_seq=page1.games[-1].seq)
        )
        ids = [g.game_id for g in (*page1.games, *page2.games)]
        assert len(ids) == 8 and set(ids) == set(by_id)
        gating = await stub.ListGames(
            coordinator_pb2.ListGamesRequest(kind=coordinator_pb2.GAME_KIND_GATING)
        )
        assert {g.game_id for g in gating.games} == {r.game_id for r in fed.gating}
        assert all(g.model == SECOND for g in gating.games)
        of_first = await stub.ListGames(coordinator_pb2.ListGamesRequest(model=FIRST))
        assert len(of_first.games) == 6
        got = await stub.DownloadGame(
            coordinator_pb2.DownloadGameRequest(game_id=fed.gating[0].game_id)
        )
        assert got.game.kind == coordinator_pb2.GAME_KIND_GATING
        assert got.sgf == next(p for p in files if p.stem == fed.gating[0].game_id).read_text()
        for req, code in (
            (coordinator_pb2.ListGamesRequest(limit=5000), grpc.StatusCode.INVALID_ARGUMENT),
            (coordinator_pb2.ListGamesRequest(kind=9), grpc.StatusCode.INVALID_ARGUMENT),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.ListGames(req)
            assert err.value.code() == code
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.DownloadGame(coordinator_pb2.DownloadGameRequest(game_id="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_releases_without_gating_are_not_drawn_at_zero_elo(coordinator_factory) -> None:
    """Gating off (the learn9 profile): every export is released with its predecessor's Elo,
    which no match measured. The gating series leaves them out and the notes say so."""
    coord = await coordinator_factory(http_listen="127.0.0.1:0", gating_enabled=False)
    names = [FIRST, SECOND, "kg-b2c16-s4000-d200"]
    for name in names:
        assert not (await publish(coord, name)).gating_scheduled
    elo = await get_json(http_url(coord) + "/api/elo")
    series = {s["key"]: s for s in elo["series"]}
    assert series["gating-released"]["points"] == []
    (note,) = elo["notes"]
    assert note.startswith("2 releases without a gating match") and "not measured" in note
    # The models table and the current model say which Elo is known: the anchor's alone.
    listed = await get_json(http_url(coord) + "/api/models")
    assert {m["name"]: m["elo_measured"] for m in listed} == {
        FIRST: True,
        SECOND: False,
        names[2]: False,
    }
    overview = await get_json(http_url(coord) + "/api/overview")
    assert overview["current_model"] == {"name": names[2], "elo": 0.0, "elo_measured": False}


@pytest.mark.slow
@pytest.mark.browser
async def test_the_elo_page_says_gating_elo_is_not_measured(coordinator_factory, browser) -> None:
    coord = await coordinator_factory(http_listen="127.0.0.1:0", gating_enabled=False)
    for name in (FIRST, SECOND):
        await publish(coord, name)
    page, errors = await open_page(browser, http_url(coord) + "/", "overview")
    await page.click('nav a[data-page="elo"]')
    await page.wait_for_selector('body[data-loaded="elo"]')
    chart = page.locator("#elo-chart")
    assert await chart.get_attribute("data-points") == "0"  # nothing drawn at +0.0
    note = await page.text_content("#elo-chart .elo-note")
    assert note is not None and note.startswith("1 release without a gating match"), note
    assert "No rated model yet." in await chart.text_content()
    await page.click('nav a[data-page="overview"]')
    await page.wait_for_selector('body[data-loaded="overview"]')
    assert "Elo not measured" in await page.text_content("#card-model")
    await page.click('nav a[data-page="models"]')
    await page.wait_for_selector('body[data-loaded="models"]')
    elo_cells = await page.locator("#models tbody tr td:nth-child(3)").all_text_contents()
    assert elo_cells == ["-", "+0.0"]  # newest first: SECOND was released without a match
    assert errors == []
