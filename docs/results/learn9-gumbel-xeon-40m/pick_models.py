"""Copy the fp32 model nearest before each given minute of a cluster run into OUT_DIR, with a
sidecar NAME.json {created_unix, selfplay_games, run_start_unix} that kgrpc-eval ladder reads
(kgrpc/programs/eval/ladder_models.py). Times come from the run's coordinator.sqlite3
(models.created_ms; self-play games accepted before it, games.accepted_ms).

    python pick_models.py RUN_DIR RUN_START_UNIX OUT_DIR MINUTES...
"""

import json
import shutil
import sqlite3
import sys
from pathlib import Path

run_dir, start, out = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
db = sqlite3.connect(f"file:{run_dir / 'coordinator.sqlite3'}?mode=ro", uri=True)
models = db.execute("SELECT name, created_ms FROM models ORDER BY created_ms").fetchall()
for minute in map(float, sys.argv[4:]):
    limit_ms = (start + 60 * minute) * 1000
    before = [(n, c) for n, c in models if c <= limit_ms]
    name, created_ms = before[-1]
    (games,) = db.execute(
        "SELECT COUNT(*) FROM games WHERE accepted_ms <= ?", (created_ms,)
    ).fetchone()
    shutil.copy2(run_dir / "models" / f"{name}.onnx", out / f"{name}.onnx")
    facts = {"created_unix": created_ms / 1000, "selfplay_games": games, "run_start_unix": start}
    (out / f"{name}.json").write_text(json.dumps(facts) + "\n")
    print(f"{minute:g} min: {name} at {(created_ms / 1000 - start) / 60:.1f} min, {games} games")
