"""Tally the level-10 matches of this report from their SGF files (the ladders were stopped
after a fixed number of games, before writing their own summaries): per match, the games,
the model's wins, Wilson's 95% interval and the distinct move sequences, counted as
kgrpc-eval counts them (its match's ``sequence_digest``).

    python docs/results/learn9-gumbel-40m/tally.py docs/results/learn9-gumbel-40m/level10
"""

import sys
from pathlib import Path

from kgrpc.go.coords import to_gtp
from kgrpc.programs.eval.match import sequence_digest
from kgrpc.rating import Rating
from kgrpc.sgf import parse_sgf

for match in sorted(Path(sys.argv[1]).glob("*/matches/*")):
    wins = games = 0
    sequences = set()
    for path in sorted((match / "games").glob("*.sgf")):
        game = parse_sgf(path.read_text())
        model_colour = "B" if game.black.startswith("kg-") else "W"
        wins += game.result.startswith(model_colour + "+")
        games += 1
        moves = [to_gtp(point, game.size) for _, point in game.moves]
        sequences.add(sequence_digest(game.black, game.white, moves, game.result))
    r = Rating.from_results(wins, games - wins, 0)
    print(
        f"{match.parent.parent.name}: {match.name}: {wins}-{games - wins} of {games}, "
        f"{100 * r.rate:.1f}% [{100 * r.rate_low:.1f}%, {100 * r.rate_high:.1f}%], "
        f"{len(sequences)} distinct"
    )
