"""Progress output: a redrawn status line on a terminal, plain log lines otherwise."""

from __future__ import annotations

import io

from trainer.progress import CSV_COLUMNS, CsvLog, Progress

LOSSES = {"loss": 3.5, "policy": 2.0, "value": 1.0, "score": 0.5, "ownership": 0.5}


def test_tty_status_line_is_redrawn_in_place() -> None:
    out = io.StringIO()
    p = Progress(out, tty=True)
    p.every = 0.0  # draw on every update
    p.update(1, 32, LOSSES, wait_s=0.0)
    p.update(2, 32, LOSSES, wait_s=0.0)
    p.message("exported kg-b1c8-s2-d10")
    p.done()
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 3 and "step 2 |" in text
    assert "samples/s" in text and "data wait" in text and "policy 2.000" in text
    # A message first ends the status line, so it is never glued onto it.
    assert "\nexported kg-b1c8-s2-d10\n" in text


def test_non_tty_writes_whole_lines() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False, log_every_s=0.0)
    for step in range(1, 4):
        p.update(step, 16, LOSSES, wait_s=0.0)
    p.done()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 4 and lines[-1].startswith("step 3 |")
    assert p.figures()["samples_per_s"] > 0


def test_csv_appends_across_restarts(tmp_path) -> None:
    path = tmp_path / "log" / "train_log.csv"
    for step in (1, 2):
        log = CsvLog(path)
        log.write(step, step * 16, LOSSES, 1e-4, 9)
        log.close()
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert [line.split(",")[1] for line in lines[1:]] == ["1", "2"]
