"""The coordinator's read-only web dashboard (``--http-listen``): :mod:`.server` (routes,
headers), :mod:`.boardview` (games for the board viewer), ``static/`` (the page, its script
and styles, and uPlot, MIT, vendored from npm with its licence)."""
