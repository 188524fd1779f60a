"""The GTP commands that set up a position rather than play in it: board size, komi, rules
(``kata-set-rules``, ``kata-get-rules``, ``kgs-rules``), handicap stones and SGF files."""

from __future__ import annotations

from kgrpc.go.board import BLACK, WHITE, IllegalMoveError
from kgrpc.go.coords import from_gtp
from kgrpc.programs.gtp import setup
from kgrpc.programs.gtp.game import GameState, GtpError


class PositionCommands(GameState):
    def cmd_boardsize(self, args: list[str]) -> str:
        try:
            size = int(args[0])
        except (IndexError, ValueError):
            raise GtpError("boardsize not an integer") from None
        if not 2 <= size <= 19:
            raise GtpError("unacceptable size")
        self.size = size
        self.cmd_clear_board([])
        return ""

    def cmd_clear_board(self, args: list[str]) -> str:
        self.history = []
        self.setup = None
        self.handicap = 0
        self._rebuild()
        return ""

    def cmd_komi(self, args: list[str]) -> str:
        try:
            komi = float(args[0])
        except (IndexError, ValueError):
            raise GtpError("komi not a float") from None
        if komi != komi or abs(komi) > 1000:
            raise GtpError("komi not a float")
        self.komi = komi
        self._rebuild()
        return ""

    def cmd_get_komi(self, args: list[str]) -> str:
        return f"{self.komi:g}"

    # ------------------------------------------------------------------ rules
    def cmd_kata_set_rules(self, args: list[str]) -> str:
        if not args:
            raise GtpError("kata-set-rules takes a rules name or KataGo's JSON rules")
        self._rebuild_or_restore(rules=setup.rules_from_katago(" ".join(args)))
        return ""

    def cmd_kata_set_rule(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpError("kata-set-rule takes a rule and a value")
        self._rebuild_or_restore(rules=setup.set_rule(self.rules, args[0], args[1]))
        return ""

    def cmd_kata_get_rules(self, args: list[str]) -> str:
        return setup.rules_to_katago(self.rules)

    def cmd_kgs_rules(self, args: list[str]) -> str:
        name = args[0].lower() if len(args) == 1 else ""
        if name not in setup.KGS_RULES:
            raise GtpError(f"kgs-rules takes one of {', '.join(setup.KGS_RULES)}")
        self._rebuild_or_restore(rules=setup.rules_from_katago(setup.KGS_RULES[name]))
        return ""

    # ------------------------------------------------------------------ handicap
    def _place_handicap(self, points: list[int]) -> str:
        if self.history or self.setup is not None:
            raise GtpError("board not empty")
        self.setup = (points, [], WHITE)
        self.handicap = len(points)
        self._rebuild()
        return setup.vertices(points, self.size)

    def _stones(self, args: list[str]) -> int:
        try:
            return int(args[0])
        except (IndexError, ValueError):
            raise GtpError("invalid number of stones") from None

    def cmd_fixed_handicap(self, args: list[str]) -> str:
        stones = self._stones(args)
        if self.history or self.setup is not None:
            raise GtpError("board not empty")
        return self._place_handicap(setup.fixed_handicap(self.size, stones))

    def cmd_place_free_handicap(self, args: list[str]) -> str:
        stones = self._stones(args)
        if self.history or self.setup is not None:
            raise GtpError("board not empty")
        return self._place_handicap(setup.free_handicap(self.size, stones))

    def cmd_set_free_handicap(self, args: list[str]) -> str:
        points = []
        for v in args:
            try:
                p = from_gtp(v, self.size)
            except ValueError:
                raise GtpError(f"invalid vertex {v!r}") from None
            if p == self.size * self.size or p in points:
                raise GtpError(f"bad vertex list: {v} is a pass or given twice")
            points.append(p)
        if not 2 <= len(points) < self.size * self.size:
            raise GtpError("bad vertex list: 2 or more stones, and not the whole board")
        self._place_handicap(points)
        return ""

    # ------------------------------------------------------------------ SGF
    def cmd_loadsgf(self, args: list[str]) -> str:
        from kgrpc.sgf import SgfError, parse_sgf

        if not args:
            raise GtpError("missing file name")
        try:
            with open(args[0], encoding="utf-8", errors="replace") as f:
                game = parse_sgf(f.read())
        except OSError:
            raise GtpError("cannot load file") from None
        except SgfError as exc:
            raise GtpError(f"cannot load file: {exc}") from None
        moves = game.moves
        if len(args) > 1:
            try:
                # GTP: the position before move number `n` (1-based), i.e. n-1 moves played.
                upto = int(args[1]) - 1
            except ValueError:
                raise GtpError("move number not an integer") from None
            moves = moves[: max(upto, 0)]
        old = (self.size, self.komi, self.rules, self.history, self.setup, self.handicap)
        self.size, self.komi, self.rules = game.size, game.komi, game.rules
        self.setup = None
        self.handicap = 0
        if game.setup_black or game.setup_white or game.first_player != BLACK:
            self.setup = (game.setup_black, game.setup_white, game.first_player)
        self.history = list(moves)
        try:
            self._rebuild()
        except (IllegalMoveError, ValueError) as exc:
            self.size, self.komi, self.rules, self.history, self.setup, self.handicap = old
            self._rebuild()
            raise GtpError(f"cannot load file: {exc}") from None
        next_colour = moves[-1][0] * -1 if moves else game.first_player
        return "black" if next_colour == BLACK else "white"

    def cmd_printsgf(self, args: list[str]) -> str:
        """The game so far as SGF; with a file name, written there (GTP answers empty)."""
        from kgrpc.sgf import SgfGame, game_to_sgf

        black, white, first = self.setup if self.setup is not None else ([], [], BLACK)
        game = SgfGame(
            size=self.size,
            komi=self.komi,
            rules=self.rules,
            setup_black=list(black),
            setup_white=list(white),
            first_player=first,
            moves=list(self.history),
        )
        text = game_to_sgf(game, handicap=self.handicap)
        if not args:
            return text
        try:
            with open(args[0], "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as exc:
            raise GtpError(f"cannot write {args[0]}: {exc.strerror}") from None
        return ""
