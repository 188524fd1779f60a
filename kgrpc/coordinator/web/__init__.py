"""The coordinator's read-only web dashboard (``--http-listen``): :mod:`.server` (routes,
headers), :mod:`.boardview` (games for the board viewer), ``static/`` (the page, its script
and styles, and uPlot, MIT, vendored from npm with its licence)."""

# Written to the data dir once the dashboard listens: its URL, ``http://host:port/``.
HTTP_FILE = "coordinator.http"
