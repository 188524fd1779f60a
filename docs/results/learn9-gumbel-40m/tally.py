"""Tally the level-10 matches of this report from their SGF files (the ladders were stopped
after a fixed number of games, before writing their own summaries): per match, the games,
the model's wins, Wilson's 95% interval and the distinct move sequences.

    python docs/results/learn9-gumbel-40m/tally.py docs/results/learn9-gumbel-40m/level10
"""

import re
import sys
from pathlib import Path

from kgrpc.rating import Rating

for match in sorted(Path(sys.argv[1]).glob("*/matches/*")):
    wins = games = 0
    sequences = set()
    for sgf in sorted((match / "games").glob("*.sgf")):
        text = sgf.read_text()
        black = re.search(r"PB\[([^\]]*)\]", text).group(1)
        white = re.search(r"PW\[([^\]]*)\]", text).group(1)
        result = re.search(r"RE\[([^\]]*)\]", text).group(1)
        model_colour = "B" if black.startswith("kg-") else "W"
        wins += result.startswith(model_colour + "+")
        games += 1
        sequences.add((black, white, "".join(re.findall(r";[BW]\[[a-z]*\]", text))))
    r = Rating.from_results(wins, games - wins, 0)
    print(
        f"{match.parent.parent.name}: {match.name}: {wins}-{games - wins} of {games}, "
        f"{100 * r.rate:.1f}% [{100 * r.rate_low:.1f}%, {100 * r.rate_high:.1f}%], "
        f"{len(sequences)} distinct"
    )
