"""SGF packs (kgrpc.coordinator.sgf_packs) on every blob store backend: one object holds many
games, each read back by one ranged read of its (offset, length)."""

from __future__ import annotations

from typing import Any

import pytest

from kgrpc.blobstore import BlobExistsError, open_checked
from kgrpc.coordinator import kept_games, sgf_packs
from kgrpc.randgame import make_random_games


def test_pack_put_and_ranged_reads(store_url: tuple[str, Any]) -> None:
    store = open_checked(store_url[0], options=store_url[1])
    prepared = [kept_games.prepare(g, "selfplay", "m1", "w1") for g in make_random_games(5, 9)]
    games = [g for g, _ in prepared]
    texts = [t for _, t in prepared]
    rows = sgf_packs.put(store, games, texts)
    assert len({r.pack for r in rows}) == 1 and rows[0].pack.startswith("sgf/packs/")
    assert [r.pack_offset for r in rows] == [sum(map(len, texts[:i])) for i in range(5)]
    for r, text in zip(rows, texts, strict=True):
        assert r.pack_length == len(text) and sgf_packs.read(store, r) == text
    assert store.get_bytes(rows[0].pack) == b"".join(texts)
    # A pack key is never reused: two flushes at once get two objects.
    assert sgf_packs.pack_key(1.0) != sgf_packs.pack_key(1.0)
    # A row that points past its pack's end is refused, not answered with a short game.
    bad = rows[-1].__class__(**{**rows[-1].__dict__, "pack_length": rows[-1].pack_length + 9})
    with pytest.raises(ValueError, match="holds"):
        sgf_packs.read(store, bad)
    with pytest.raises(BlobExistsError):
        store.put_bytes(rows[0].pack, b"other", create_only=True)
