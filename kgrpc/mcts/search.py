"""Batched asynchronous PUCT search with virtual loss.

One :class:`Search` belongs to one game (or one GTP player). Each round it walks
``leaves_per_batch`` paths down the tree, adding a virtual loss on every edge it takes so the
next path goes elsewhere, then sends all new leaves to the evaluator in one request and backs
the results up. Many games run as asyncio tasks on one event loop and share one evaluator
(a remote inference client or the in-process engine), which merges their requests into
large batches.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

import numpy as np

from kgrpc.evaluator import EvalResult, Evaluator
from kgrpc.go import features, symmetry
from kgrpc.go.board import BLACK, Board
from kgrpc.mcts.config import SearchConfig
from kgrpc.mcts.gumbel import GumbelRoot
from kgrpc.mcts.tree import Node, forced_playouts

__all__ = [
    "EvalResult",
    "Evaluator",
    "Search",
    "SearchStats",
    "best_move",
    "pass_wins",
    "policy_target",
    "pruned_visits",
    "sample_move",
    "sensible_root_moves",
    "terminal_value",
]


@dataclass
class SearchStats:
    """Counters shared by every search of a process (read by the status line)."""

    visits: int = 0
    nn_evals: int = 0
    nn_requests: int = 0
    searches: int = 0
    # Of the searches that finished: the root's child visits at the end, and those it began
    # with from the previous move's tree. ``visits`` counts new visits (KataGo's playouts);
    # KataGo's "visits" of a search are its root visits, the reused subtree included.
    root_visits: int = 0
    reused_visits: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def mean_leaves_per_request(self) -> float:
        return self.nn_evals / self.nn_requests if self.nn_requests else 0.0


def terminal_value(board: Board) -> tuple[float, float]:
    """(value, score) of a finished position for the player to move there."""
    black_score = float(board.score())
    mover_score = black_score if board.to_play == BLACK else -black_score
    value = 1.0 if mover_score > 0 else (-1.0 if mover_score < 0 else 0.0)
    return value, mover_score


def pass_wins(board: Board) -> bool:
    """Would passing now win on the area count (all stones counted alive)?

    True when the mover is ahead and either the opponent just passed (a pass ends the game) or
    the board is settled: no empty point touches both colours, so nothing is left to contest.
    """
    _, mover_score = terminal_value(board)
    if mover_score <= 0:
        return False
    if board.consecutive_passes >= 1:
        return True
    ownership = board.area_ownership()
    return not bool(np.any(ownership[board.stones == 0] == 0))


def sensible_root_moves(board: Board, legal: np.ndarray) -> np.ndarray:
    """The legal moves a player considers at the root: no filling of its own single-point
    eyes, and pass only when :func:`pass_wins` (or when nothing else is left)."""
    mask = legal.copy()
    me = board.to_play
    for move in np.flatnonzero(legal[:-1]):
        if board.is_own_eye(int(move), me):
            mask[move] = False
    if mask[:-1].any():
        mask[-1] = bool(legal[-1]) and pass_wins(board)
    else:
        mask[-1] = legal[-1]
    return mask


class Search:
    """The search tree of one game, reused from move to move."""

    def __init__(
        self,
        evaluator: Evaluator,
        config: SearchConfig,
        *,
        model: str = "",
        max_moves: int | None = None,
        stats: SearchStats | None = None,
        seed: int | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.config = config
        self.model = model
        self.max_moves = max_moves
        self.stats = stats if stats is not None else SearchStats()
        self.rng = np.random.default_rng(seed)
        self._sym_rng = random.Random(seed)
        self.root: Node | None = None
        # The running search's score utility: (factor, centre from the root mover's view,
        # scale), or None; and the forced playouts' k at its root (0: none).
        self.utility: tuple[float, float, float] | None = None
        self.forced_k = 0.0
        # The last search's root state when config.gumbel (its move and target: see
        # gumbel_move / gumbel_target), else None.
        self.gumbel: GumbelRoot | None = None

    # -- tree management -------------------------------------------------------------------

    def _is_final(self, board: Board) -> bool:
        return board.is_over() or (
            self.max_moves is not None and board.move_number >= self.max_moves
        )

    def root_for(self, board: Board) -> Node:
        """The node for ``board``: the reused subtree when the history matches, else fresh."""
        root = self.root
        if root is not None and self.config.tree_reuse:
            node: Node | None = root
            have = root.board.moves
            want = board.moves
            if (
                len(want) >= len(have)
                and want[: len(have)] == have
                and root.board.komi == board.komi
                and root.board.rules == board.rules
                and root.board.size == board.size
            ):
                for move in want[len(have) :]:
                    node = node.children.get(move) if node is not None else None
                if (
                    node is not None
                    and node.board.to_play == board.to_play
                    and np.array_equal(node.board.stones, board.stones)
                ):
                    if node is not root:
                        node.detach()
                    self.root = node
                    return node
        self.root = Node(board.copy())
        return self.root

    def advance(self, move: int) -> None:
        """Follow ``move`` in the tree (tree reuse); drop the tree if it has no such child."""
        root = self.root
        if root is None or not self.config.tree_reuse:
            self.root = None
            return
        child = root.children.get(move)
        if child is None:
            self.root = None
            return
        child.detach()
        self.root = child

    # -- the search ------------------------------------------------------------------------

    async def run(
        self,
        board: Board,
        visits: int | None = None,
        *,
        noise: tuple[float, float] | None = None,
        allow_pass: bool = True,
        forced_k: float = 0.0,
        gumbel: bool | None = None,
    ) -> Node:
        """Search ``board`` until the root has ``visits`` child visits; returns the root.

        ``noise`` = (dirichlet alpha for 19x19, fraction) mixes Dirichlet noise into the root
        prior, alpha scaled by 361 / legal moves (KataGo's rule);
        ``allow_pass=False`` removes pass from the root's choices (unless nothing else is legal);
        with ``config.sensible_root_moves`` the root only considers :func:`sensible_root_moves`.
        ``forced_k`` > 0 forces playouts at the root (:func:`kgrpc.mcts.tree.forced_playouts`;
        self-play passes it for full searches with noise, then prunes with
        :func:`pruned_visits`). With ``config.score_utility_factor`` the search's score
        utility is centred on the root's mean score as the search starts.

        With ``config.gumbel`` the root is a Gumbel search (:mod:`kgrpc.mcts.gumbel`): exactly
        ``visits`` new simulations (reused visits do not count), no Dirichlet noise and no
        forced playouts (its Gumbel draws explore); :meth:`gumbel_move` and
        :meth:`gumbel_target` read its result. ``gumbel`` overrides ``config.gumbel`` for
        this search (analysis grows a PUCT tree to a visit count, which Gumbel cannot).
        """
        if self._is_final(board):
            raise ValueError("cannot search a finished game")
        target = self.config.visits if visits is None else int(visits)
        if target < 1:
            raise ValueError(f"visits must be >= 1, got {target}")
        root = self.root_for(board)
        if not root.expanded:
            root.pending = True
            await self._evaluate([root])
        assert root.legal is not None
        mask = (
            sensible_root_moves(board, root.legal)
            if self.config.sensible_root_moves
            else np.ones_like(root.legal)
        )
        if not allow_pass and root.legal[-1] and root.legal[:-1].any():
            mask[-1] = False
        if not mask.all():
            root.restrict(mask)
        elif root.prior is not root.raw_prior:
            root.prior = root.raw_prior  # no stale noise from an earlier search of this node
        cfg = self.config
        use_gumbel = cfg.gumbel if gumbel is None else gumbel
        if use_gumbel:
            noise, forced_k = None, 0.0
        if noise is not None:
            num_legal = int(root.legal.sum())
            root.add_noise(self.rng, noise[0] * 361 / max(1, num_legal), noise[1])
        self.stats.searches += 1

        self.forced_k = float(forced_k)
        self.utility = (
            (cfg.score_utility_factor, root.mean_score(), cfg.utility_scale(board.size))
            if cfg.score_utility_factor > 0
            else None
        )
        gumbel = self.gumbel = (
            GumbelRoot(
                root,
                target,
                considered=cfg.gumbel_considered,
                c_visit=cfg.gumbel_c_visit,
                c_scale=cfg.gumbel_c_scale,
                noise_scale=cfg.gumbel_scale,
                rng=self.rng,
                utility=self.utility,
            )
            if use_gumbel
            else None
        )
        vl = cfg.virtual_loss
        counted = reused = root.n_total
        while (gumbel.sims < gumbel.budget) if gumbel else (root.n_total < target):
            if gumbel:
                want = min(cfg.leaves_per_batch, gumbel.budget - gumbel.sims)
                gumbel.refresh()
            else:
                want = min(cfg.leaves_per_batch, int(np.ceil(target - root.n_total)))
            paths: list[list[tuple[Node, int]]] = []
            leaves: list[Node] = []
            for _ in range(want):
                path, leaf = self._descend(root, vl)
                if leaf.terminal:
                    self._backup(path, leaf.value, leaf.score, vl)
                elif leaf.pending:  # another path of this round already waits for it
                    if gumbel:
                        gumbel.undo(path[0][1])
                    self._revert(path, vl)
                else:
                    leaf.pending = True
                    paths.append(path)
                    leaves.append(leaf)
            if leaves:
                try:
                    await self._evaluate(leaves)
                except BaseException:
                    for path, leaf in zip(paths, leaves, strict=True):
                        leaf.pending = False
                        self._revert(path, vl)
                    raise
                for path, leaf in zip(paths, leaves, strict=True):
                    self._backup(path, leaf.value, leaf.score, vl)
            # Counted as they land, so a long search shows progress on the status line.
            self.stats.visits += int(root.n_total - counted)
            counted = root.n_total
        self.stats.root_visits += int(root.n_total)
        self.stats.reused_visits += int(reused)
        return root

    def gumbel_move(self) -> int:
        """The move the last (Gumbel) search chose: its best survivor."""
        if self.gumbel is None:
            raise ValueError("the last search was not a Gumbel search")
        self.gumbel.refresh()
        return self.gumbel.final_move()

    def gumbel_target(self) -> tuple[list[int], list[float]]:
        """The last (Gumbel) search's policy target: the prior improved by completed Q."""
        if self.gumbel is None:
            raise ValueError("the last search was not a Gumbel search")
        self.gumbel.refresh()
        return self.gumbel.improved_policy()

    async def evaluate_root(self, board: Board) -> Node:
        """The root for ``board``, evaluated (the net's prior, value and score) but not
        searched: what a raw-policy opening move is drawn from."""
        if self._is_final(board):
            raise ValueError("cannot search a finished game")
        root = self.root_for(board)
        if not root.expanded:
            root.pending = True
            await self._evaluate([root])
        return root

    def _descend(self, root: Node, vl: float) -> tuple[list[tuple[Node, int]], Node]:
        cfg = self.config
        node = root
        path: list[tuple[Node, int]] = []
        utility = self.utility
        while node.expanded and not node.terminal:
            fpu = cfg.root_fpu_reduction if node is root else cfg.fpu_reduction
            if node is root and self.gumbel is not None:
                move = self.gumbel.select()
            elif utility is None:
                move = node.select(cfg.c_puct, fpu, forced_k=self.forced_k if node is root else 0.0)
            else:
                # The centre from this node's mover's view: the root mover's at even depths.
                factor, centre, scale = utility
                view = (factor, centre if len(path) % 2 == 0 else -centre, scale)
                move = node.select(
                    cfg.c_puct, fpu, view, forced_k=self.forced_k if node is root else 0.0
                )
            node.child_n[move] += vl  # type: ignore[index]
            node.child_w[move] -= vl  # type: ignore[index]
            node.n_total += vl
            path.append((node, move))
            node = node.child(move)
            if not node.expanded and not node.pending and self._is_final(node.board):
                node.set_terminal(*terminal_value(node.board))
        return path, node

    @staticmethod
    def _revert(path: list[tuple[Node, int]], vl: float) -> None:
        for node, move in path:
            node.child_n[move] -= vl  # type: ignore[index]
            node.child_w[move] += vl  # type: ignore[index]
            node.n_total -= vl

    @staticmethod
    def _backup(path: list[tuple[Node, int]], value: float, score: float, vl: float) -> None:
        # Values are stored from the view of the player choosing at each node, who is the
        # opponent of the player to move one level down: flip the sign at every step.
        v, s = value, score
        for node, move in reversed(path):
            v, s = -v, -s
            node.child_n[move] += 1.0 - vl  # type: ignore[index]
            node.child_w[move] += v + vl  # type: ignore[index]
            node.child_s[move] += s  # type: ignore[index]
            node.n_total += 1.0 - vl

    async def _evaluate(self, leaves: list[Node]) -> None:
        size = leaves[0].board.size
        nn = size * size
        count = len(leaves)
        planes = np.empty((count, features.NUM_PLANES, nn), dtype=bool)
        globals_ = np.empty((count, features.NUM_GLOBALS), dtype=np.float32)
        syms = [0] * count
        use_sym = self.config.random_symmetry
        for i, leaf in enumerate(leaves):
            p, g = features.encode_flat(leaf.board)
            if use_sym:
                sym = self._sym_rng.randrange(symmetry.NUM_SYMMETRIES)
                syms[i] = sym
                if sym:
                    p = p[:, _sym_maps(sym, size)[0]]  # one gather instead of rot90 + transpose
            planes[i] = p
            globals_[i] = g
        planes4 = planes.reshape(count, features.NUM_PLANES, size, size)
        if self.model:
            result = await self.evaluator.evaluate(planes4, globals_, model=self.model)
        else:
            result = await self.evaluator.evaluate(planes4, globals_)
        policy = np.asarray(result.policy, dtype=np.float32)
        value = np.asarray(result.value, dtype=np.float32)
        score = np.asarray(result.score, dtype=np.float32)
        if policy.shape != (count, nn + 1) or value.shape != (count,):
            raise ValueError(
                f"evaluator returned policy {policy.shape} / value {value.shape} for "
                f"{count} positions of size {size}"
            )
        self.stats.nn_evals += count
        self.stats.nn_requests += 1
        # A non-finite output (a net gone numerically bad, a broken server) must not reach the
        # tree: one NaN leaf makes every value above it NaN, and the coordinator rejects a game
        # with a NaN root value. NaN reads as "no idea" (0); the policy is checked in expand.
        if not (np.isfinite(value).all() and np.isfinite(score).all()):
            value = np.nan_to_num(value, nan=0.0, posinf=1.0, neginf=-1.0)
            score = np.nan_to_num(score, nan=0.0, posinf=2.0 * nn, neginf=-2.0 * nn)
        np.clip(value, -1.0, 1.0, out=value)
        for i, leaf in enumerate(leaves):
            pol = policy[i]
            if syms[i]:
                pol = pol[_sym_maps(syms[i], size)[1]]  # back to the leaf's own orientation
            leaf.expand(pol, float(value[i]), float(score[i]))


@functools.cache
def _sym_maps(sym: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(source point of each transformed point, transformed index of each move incl. pass):
    transformed planes = flat[:, src]; policy back in the original frame = policy_t[dst]."""
    nn = size * size
    src = symmetry.apply_planes(np.arange(nn).reshape(size, size), sym).ravel()
    dst = np.empty(nn + 1, dtype=np.intp)
    dst[src] = np.arange(nn)
    dst[nn] = nn
    return src.astype(np.intp), dst


# -- reading a finished search ---------------------------------------------------------------


def policy_target(root: Node, visits: np.ndarray | None = None) -> tuple[list[int], list[float]]:
    """The root's visit distribution as sparse (moves, probabilities) over legal moves
    (``visits``: the counts to use instead of the root's, e.g. :func:`pruned_visits`)."""
    n = root.visits() if visits is None else visits
    moves = np.flatnonzero((n > 0) & root.legal)
    total = float(n[moves].sum())
    if total <= 0:
        raise ValueError("the root has no visits")
    probs = n[moves].astype(np.float64) / total
    return moves.tolist(), probs.tolist()


def pruned_visits(
    root: Node,
    c_puct: float,
    forced_k: float,
    utility: tuple[float, float, float] | None = None,
) -> np.ndarray:
    """Policy target pruning (KataGo): the root's visits less, for every child but the most
    visited (:func:`best_move`), up to its forced playouts (:func:`forced_playouts` of the
    search's prior and total visits) as long as its PUCT value stays at or below the best
    child's; a child left with one visit or less gets none. float64 [moves].

    ``utility`` is the search's (:attr:`Search.utility`, centre from the root mover's view);
    the PUCT values are those the search used: noisy prior, mean value plus score utility."""
    n = root.visits().astype(np.float64)
    assert root.child_w is not None and root.prior is not None
    out = n.copy()
    best = best_move(root)
    visited = (n > 0) & root.legal
    q = np.zeros_like(n)
    q[visited] = root.child_w[visited].astype(np.float64) / n[visited]
    if utility is not None:
        q[visited] += root.child_utilities(utility)[visited].astype(np.float64)
    prior = root.prior.astype(np.float64)
    explore = c_puct * math.sqrt(root.n_total + 1.0)
    best_puct = q[best] + explore * prior[best] / (1.0 + n[best])
    forced = forced_playouts(forced_k, root.prior, root.n_total)
    for move in np.flatnonzero(visited):
        if move == best:
            continue
        gap = best_puct - q[move]
        if gap <= 0:
            continue  # its value alone earns it every visit
        # PUCT(move, m) <= best_puct  <=>  m >= explore * prior / gap - 1
        least = math.ceil(explore * prior[move] / gap - 1.0)
        kept = max(n[move] - float(forced[move]), float(least), 0.0)
        kept = min(kept, n[move])
        out[move] = 0.0 if kept <= 1.0 else kept
    return out


def best_move(root: Node) -> int:
    """Most visited move; ties go to the higher mean value."""
    n = root.visits()
    q = np.where(n > 0, root.child_w / np.maximum(n, 1e-9), -2.0)
    key = np.where(root.legal, n + 1e-3 * (q + 2.0) / 4.0, -1.0)
    return int(np.argmax(key))


def sample_move(
    root: Node,
    rng: np.random.Generator,
    temperature: float = 1.0,
    visits: np.ndarray | None = None,
) -> int:
    """A move drawn with probability proportional to visits ** (1 / temperature) (``visits``:
    the counts to use instead of the root's, e.g. :func:`pruned_visits`)."""
    n = np.where(root.legal, root.visits() if visits is None else visits, 0.0).astype(np.float64)
    if n.sum() <= 0:
        return best_move(root)
    if temperature != 1.0:
        n = (n / n.max()) ** (1.0 / temperature)  # scaled first: no overflow at low temperature
    return int(rng.choice(n.shape[0], p=n / n.sum()))
