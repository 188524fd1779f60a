// Finishing a move: the move chosen from the root, its search target (visits, pruned
// visits, or the Gumbel completed-Q target), tree reuse for the next move, a game's end.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "features.h"
#include "search.h"
#include "search_internal.h"

namespace kgn {

using namespace search_detail;

namespace {

// The subtree under `node` as a tree of its own (tree reuse frees the rest).
void copy_subtree(const Tree& from, int32_t node, Tree& to) {
  to.clear();
  struct Item {
    int32_t src, dst;
  };
  std::vector<Item> stack;
  to.root = to.add_node();
  stack.push_back({node, to.root});
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    const Node& a = from.nodes[it.src];
    Node copy = a;
    if (a.state == NODE_EXPANDED || a.state == NODE_PENDING) {
      to.nodes[it.dst] = copy;
      to.set_edges(it.dst, &from.move[a.edge0], a.nedges);
      const int32_t dst_first = to.nodes[it.dst].edge0;
      for (int i = 0; i < a.nedges; i++) {
        to.prior[dst_first + i] = from.prior[a.edge0 + i];
        to.n[dst_first + i] = from.n[a.edge0 + i];
        to.w[dst_first + i] = from.w[a.edge0 + i];
        to.s[dst_first + i] = from.s[a.edge0 + i];
        to.legal[dst_first + i] = from.legal[a.edge0 + i];
        to.vnext[dst_first + i] = from.vnext[a.edge0 + i];
        const int32_t c = from.child[a.edge0 + i];
        if (c >= 0) {
          const int32_t d = to.add_node();
          to.child[dst_first + i] = d;
          stack.push_back({c, d});
        }
      }
    } else {
      copy.edge0 = 0;
      copy.nedges = 0;
      to.nodes[it.dst] = copy;
    }
  }
}

}  // namespace

// kgrpc.mcts.search.best_move: most visits, ties to the higher mean value.
int GameSet::best_edge(const Game& g) const {
  const Tree& t = g.tree;
  const Node& root = t.nodes[t.root];
  const int first_edge = root.edge0, num_edges = root.nedges;
  int chosen = -1;
  float best_key = 0;
  for (int i = 0; i < num_edges; i++) {
    if (!t.legal[first_edge + i]) continue;
    const float ni = t.n[first_edge + i];
    // The mean value breaks ties between equal visit counts: q + 2 maps [-1, 1] (or -2 for an
    // unvisited child, below any mean) into [0, 3], and 0.001 / 4 keeps the whole term under
    // one visit, so it never outweighs a visit. The same float32 expression as the reference.
    const float q = ni > 0 ? t.w[first_edge + i] / std::max(ni, 1e-9f) : -2.0f;
    const float key = ni + (0.001f * (q + 2.0f)) / 4.0f;
    if (chosen < 0 || key > best_key) {
      chosen = i;
      best_key = key;
    }
  }
  KGN_DCHECK(chosen >= 0);  // pass is always legal
  return chosen;
}

// kgrpc.mcts.search.pruned_visits: the root's visits less the forced playouts that PUCT would
// not have earned, for every child but the best; children left with <= 1 visit get none.
void GameSet::pruned_visits(const Game& g, double* kept) const {
  const Tree& t = g.tree;
  const Node& root = t.nodes[t.root];
  const int first_edge = root.edge0, num_edges = root.nedges;
  const float* prior = g.root_noisy ? g.root_prior.data() : &t.prior[first_edge];
  const double factor = cfg_.search.score_utility_factor;
  const double scale = utility_scale();
  std::vector<double> q(num_edges, 0.0);
  for (int i = 0; i < num_edges; i++) {
    const float ni = t.n[first_edge + i];
    kept[i] = static_cast<double>(ni);
    if (!(ni > 0) || !t.legal[first_edge + i]) continue;
    q[i] = static_cast<double>(t.w[first_edge + i]) / static_cast<double>(ni);
    if (factor > 0) {
      const float su = static_cast<float>(score_utility(
          factor, static_cast<double>(t.s[first_edge + i] / ni), g.centre, scale));
      q[i] += static_cast<double>(su);
    }
  }
  const int best = best_edge(g);
  const double explore = cfg_.search.c_puct * std::sqrt(root.n_total + 1.0);
  const double best_puct = q[best] + explore * static_cast<double>(prior[best]) / (1.0 + kept[best]);
  for (int i = 0; i < num_edges; i++) {
    const double ni = kept[i];
    if (i == best || !(ni > 0) || !t.legal[first_edge + i]) continue;
    const double gap = best_puct - q[i];
    if (!(gap > 0)) continue;
    const double pi = static_cast<double>(prior[i]);
    const double forced = std::sqrt(cfg_.forced_playouts_k * pi * root.n_total);
    // The visits PUCT gave this child on its own merit: with n > explore * pi / gap - 1,
    // q + explore * pi / (1 + n) falls below best_puct, and PUCT would have chosen the best.
    const double least = std::ceil(explore * pi / gap - 1.0);
    double left = std::max(std::max(ni - forced, least), 0.0);
    left = std::min(left, ni);
    kept[i] = left <= 1.0 ? 0.0 : left;
  }
}

QUtility GameSet::gumbel_utility(const Game& g) const {
  QUtility u;
  if (cfg_.search.score_utility_factor > 0) {
    u.factor = cfg_.search.score_utility_factor;
    u.centre = g.centre;
    u.scale = utility_scale();
  }
  return u;
}

bool GameSet::search_done(const Game& g) const {
  if (cfg_.search.gumbel) return g.gumbel.sims() >= g.gumbel.budget();
  return g.tree.nodes[g.tree.root].n_total >= g.target_visits;
}

// The Gumbel search's target (the improved policy over the legal root moves, those it gives
// any probability) in place of the visit distribution: edges into idx, probabilities into
// probs, their total into total; returns how many.
int GameSet::gumbel_target(Game& g, int* idx, double* probs, double& total) {
  g.gumbel.refresh(g.tree, cfg_.search.gumbel_cfg, gumbel_utility(g));
  std::vector<double> p;
  g.gumbel.improved_policy(p);
  int nv = 0;
  for (int i = 0; i < static_cast<int>(p.size()); i++) {
    if (!(p[i] > 0)) continue;
    idx[nv] = i;
    probs[nv++] = p[i];
  }
  total = 1.0;
  return nv;
}

void GameSet::finish_move(Game& g) {
  Tree& t = g.tree;
  Node& root = t.nodes[t.root];
  const int first_edge = root.edge0, num_edges = root.nedges;
  double kept[MAXNN + 1];
  stats.root_visits += static_cast<uint64_t>(root.n_total);
  stats.reused_visits += static_cast<uint64_t>(g.reused);
  const bool pruned = g.forced && cfg_.prune_policy_target;
  if (pruned) pruned_visits(g, kept);
  // policy_target: visited legal moves, visits / their (float32, pairwise) total; or the
  // pruned visits (float64) / their total
  float visit_counts[MAXNN + 1];
  double target_weights[MAXNN + 1];
  int idx[MAXNN + 1];
  int n_target = 0;
  double total = 0;
  if (pruned) {
    for (int i = 0; i < num_edges; i++) {
      if (kept[i] > 0 && t.legal[first_edge + i]) {
        target_weights[n_target] = kept[i];
        total += kept[i];
        idx[n_target++] = i;
      }
    }
  } else {
    for (int i = 0; i < num_edges; i++) {
      if (t.n[first_edge + i] > 0 && t.legal[first_edge + i]) {
        visit_counts[n_target] = t.n[first_edge + i];
        target_weights[n_target] = static_cast<double>(visit_counts[n_target]);
        idx[n_target++] = i;
      }
    }
    total = pairwise_sum(visit_counts, n_target);
  }
  if (total <= 0) throw std::logic_error("the root has no visits");
  if (cfg_.search.gumbel) n_target = gumbel_target(g, idx, target_weights, total);
  TargetOut target;
  target.full = g.full;
  target.visits = static_cast<int32_t>(root.n_total);
  const float wsum = pairwise_sum_sparse(&t.w[first_edge], &t.move[first_edge], num_edges, 0, nn_ + 1);
  const float ssum = pairwise_sum_sparse(&t.s[first_edge], &t.move[first_edge], num_edges, 0, nn_ + 1);
  target.root_value = clip1((static_cast<double>(root.value) + wsum) / (1.0 + root.n_total));
  target.root_score = (static_cast<double>(root.score) + ssum) / (1.0 + root.n_total);
  target.policy0 = static_cast<int32_t>(g.policy_moves.size());
  target.policy_len = n_target;
  for (int j = 0; j < n_target; j++) {
    g.policy_moves.push_back(t.move[first_edge + idx[j]]);
    g.policy_probs.push_back(target_weights[j] / total);
  }
  // The move: sampled with temperature in the opening, else the most visited.
  int chosen = -1;
  if (cfg_.search.gumbel) {
    chosen = g.gumbel.final_edge();  // already a sample: no temperature on top
  } else if (static_cast<int>(g.board.moves.size()) < cfg_.temperature_moves) {
    double weights[MAXNN + 1];
    double sum = 0, top = 0;
    for (int i = 0; i < num_edges; i++) {
      const double ni = pruned ? kept[i] : static_cast<double>(t.n[first_edge + i]);
      weights[i] = t.legal[first_edge + i] ? ni : 0.0;
      sum += weights[i];
      top = std::max(top, weights[i]);
    }
    if (sum > 0) {
      if (cfg_.temperature != 1.0) {
        sum = 0;
        for (int i = 0; i < num_edges; i++) {
          weights[i] = std::pow(weights[i] / top, 1.0 / cfg_.temperature);
          sum += weights[i];
        }
      }
      chosen = draw_weighted(weights, num_edges, g.rng.uniform() * sum);
    }
  }
  if (chosen < 0) chosen = best_edge(g);
  KGN_DCHECK(chosen >= 0 && chosen < num_edges && t.legal[first_edge + chosen]);
  const int move = t.move[first_edge + chosen];
  const int mover = g.board.tp;
  if (cfg_.resign_threshold > 0) {
    const int side = mover == 1 ? 0 : 1;
    const float rv = static_cast<float>(target.root_value);  // as the record stores it
    g.low_streak[side] = rv < -cfg_.resign_threshold ? g.low_streak[side] + 1 : 0;
    if (g.low_streak[side] >= cfg_.resign_consecutive) {
      if (g.may_resign) {
        const int winner = -mover;
        const double ms = static_cast<float>(target.root_score);
        const double black = mover == 1 ? ms : -ms;
        const double magnitude = std::min(std::max(std::fabs(black), 0.5), static_cast<double>(nn_));
        g.resigned = true;
        g.winner = winner;
        g.score = winner == 1 ? magnitude : -magnitude;
        g.ownership.resize(nn_);
        int cnt[4];
        g.board.regions(nullptr, g.ownership.data(), cnt);
        g.policy_moves.resize(target.policy0);
        g.policy_probs.resize(target.policy0);
        g.phase = PH_DONE;
        g.tree.clear();
        stats.games++;
        return;
      }
      if (!g.would_resign_color) g.would_resign_color = mover;
    }
  }
  target.played_visits = static_cast<int32_t>(t.n[first_edge + chosen]);
  g.moves.push_back(static_cast<int16_t>(move));
  g.targets.push_back(target);
  g.board.play_unchecked(move);
  stats.moves++;
  // Tree reuse: the played move's subtree becomes the next root.
  const int32_t c = t.child[first_edge + chosen];
  if (cfg_.search.tree_reuse && c >= 0) {
    copy_subtree(t, c, g.spare);  // into the spare tree, whose arrays keep their capacity
    std::swap(g.tree, g.spare);
    g.spare.clear();
  } else {
    g.tree.clear();
  }
  if (cfg_.two_models) advance_other(g, move);
  g.root_noisy = false;
  if (g.board.is_over() || static_cast<int>(g.board.moves.size()) >= cfg_.max_moves) {
    end_game(g);
  } else {
    g.phase = PH_BEGIN;
  }
}

// two_models: the other colour's tree follows the move too (Search.advance), then becomes the
// tree of the player to move, with its symmetry draws.
void GameSet::advance_other(Game& g, int move) {
  Tree& o = g.other;
  int32_t c = -1;
  if (cfg_.search.tree_reuse && o.root >= 0) {
    const Node& r = o.nodes[o.root];
    for (int i = 0; i < r.nedges; i++) {
      if (o.move[r.edge0 + i] == move) {
        c = o.child[r.edge0 + i];
        break;
      }
    }
  }
  if (c >= 0) {
    copy_subtree(o, c, g.spare);
    std::swap(o, g.spare);
    g.spare.clear();
  } else {
    o.clear();
  }
  std::swap(g.tree, g.other);
  std::swap(g.sym_rng, g.sym_rng_other);
}

void GameSet::end_game(Game& g) {
  g.score = g.board.score();
  g.winner = g.score > 0 ? 1 : (g.score < 0 ? -1 : 0);
  g.ownership.resize(nn_);
  int cnt[4];
  g.board.regions(nullptr, g.ownership.data(), cnt);
  g.phase = PH_DONE;
  g.tree.clear();
  stats.games++;
}

std::vector<Game> GameSet::take_finished() {
  std::vector<Game> out;
  out.swap(finished_);
  return out;
}

}  // namespace kgn
