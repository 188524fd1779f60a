// The start of a move's search: the playout cap's draw (full or cheap search), the root's
// sensible moves and its restriction to them, Dirichlet noise, the score utility's centre,
// and the raw-policy opening moves played without a search.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "features.h"
#include "search.h"
#include "search_internal.h"

namespace kgn {

using namespace search_detail;

// Python: full = rng.random() < full_search_prob, then Search.run's start.
void GameSet::begin_move(Game& g) {
  g.opening = g.opening_left > 0;
  if (g.opening) {
    g.full = g.noise = g.forced = false;
  } else {
    g.full = g.rng.uniform() < cfg_.full_search_prob;
    // A Gumbel search explores by its own draws: no Dirichlet noise, no forced playouts.
    g.noise = g.full && cfg_.noise_fraction > 0 && !cfg_.search.gumbel;
    g.forced = g.noise && cfg_.forced_playouts_k > 0;
  }
  g.target_visits = g.full ? cfg_.search.visits : cfg_.cheap_visits;
  g.root_noisy = false;
  if (g.tree.root < 0) {
    g.tree.clear();
    g.tree.root = g.tree.add_node();
  }
  const Node& root = g.tree.nodes[g.tree.root];
  if (root.state != NODE_EXPANDED) {
    g.phase = PH_ROOT_EVAL;
  } else if (g.opening) {
    play_opening_move(g);
  } else {
    start_search(g);
  }
}

// kgrpc.mcts.search.sensible_root_moves over the root's edges (all legal moves when the
// setting is off); true when every legal move is sensible.
bool GameSet::root_mask(const Game& g, std::vector<uint8_t>& mask) const {
  const Tree& t = g.tree;
  const Node& root = t.nodes[t.root];
  const int first_edge = root.edge0, num_edges = root.nedges;
  const Board& b = g.board;
  bool all = num_edges == nn_ + 1;
  mask.resize(num_edges);
  for (int i = 0; i < num_edges; i++) mask[i] = t.legal[first_edge + i];
  if (cfg_.search.sensible_root_moves) {
    bool any_point = false;
    int pass_edge = -1;
    for (int i = 0; i < num_edges; i++) {
      const int mv = t.move[first_edge + i];
      if (mv == nn_) {
        pass_edge = i;
        continue;
      }
      if (mask[i] && b.is_eye(mv, b.tp)) mask[i] = 0;
      if (mask[i]) any_point = true;
    }
    if (pass_edge >= 0 && any_point && mask[pass_edge]) {
      // pass_wins: the mover is ahead on the area count and the game would end or is settled
      const double black = b.score();
      const double mover = b.tp == 1 ? black : -black;
      bool wins = false;
      if (mover > 0) {
        if (b.consecutive_passes >= 1) {
          wins = true;
        } else {
          int8_t own[MAXNN];
          int cnt[4];
          b.regions(nullptr, own, cnt);
          wins = true;
          for (int p = 0; p < nn_; p++)
            if (b.stones[p] == 0 && own[p] == 0) wins = false;
        }
      }
      if (!wins) mask[pass_edge] = 0;
    }
    for (int i = 0; i < num_edges; i++)
      if (!mask[i]) all = false;
  } else {
    all = true;
  }
  return all;
}

// kgrpc.mcts.selfplay._opening_move: a move drawn from the raw prior ** (1 / temperature)
// over the sensible root moves, recorded as a cheap target of no visits.
void GameSet::play_opening_move(Game& g) {
  Tree& t = g.tree;
  const Node& root = t.nodes[t.root];
  const int first_edge = root.edge0, num_edges = root.nedges;
  std::vector<uint8_t> mask;
  root_mask(g, mask);
  std::vector<double> weights(num_edges, 0.0);
  double sum = 0, top = 0;
  for (int i = 0; i < num_edges; i++) {
    if (mask[i] && t.legal[first_edge + i])
      weights[i] = static_cast<double>(t.prior[first_edge + i]);
    sum += weights[i];
  }
  if (!(sum > 0)) {
    for (int i = 0; i < num_edges; i++)
      weights[i] = (mask[i] && t.legal[first_edge + i]) ? 1.0 : 0.0;
  }
  for (int i = 0; i < num_edges; i++) top = std::max(top, weights[i]);
  sum = 0;
  for (int i = 0; i < num_edges; i++) {
    weights[i] = top > 0 ? std::pow(weights[i] / top, 1.0 / cfg_.opening_temperature) : 0.0;
    sum += weights[i];
  }
  int chosen = draw_weighted(weights.data(), num_edges, g.rng.uniform() * sum);
  if (chosen < 0) chosen = 0;  // no legal move at all cannot happen: pass is always legal
  const int move = t.move[first_edge + chosen];
  TargetOut target;
  target.full = false;
  target.visits = 0;
  target.played_visits = 0;
  target.root_value = clip1(static_cast<double>(root.value));
  target.root_score = static_cast<double>(root.score);
  target.policy0 = static_cast<int32_t>(g.policy_moves.size());
  target.policy_len = 1;
  g.policy_moves.push_back(move);
  g.policy_probs.push_back(1.0);
  g.moves.push_back(static_cast<int16_t>(move));
  g.targets.push_back(target);
  g.board.play_unchecked(move);
  stats.moves++;
  g.tree.clear();
  g.opening_left--;
  g.opening = false;
  if (is_final(g.board)) {
    end_game(g);
  } else {
    g.phase = PH_BEGIN;
  }
}

// After the root's evaluation: sensible root moves (restrict), Dirichlet noise.
void GameSet::start_search(Game& g) {
  Tree& t = g.tree;
  Node& root = t.nodes[t.root];
  const int first_edge = root.edge0, num_edges = root.nedges;
  std::vector<uint8_t> mask;
  const bool all = root_mask(g, mask);
  if (!all) {
    // Node.restrict(mask)
    bool any = false;
    for (int i = 0; i < num_edges; i++)
      if (t.legal[first_edge + i] && mask[i]) any = true;
    if (any) {
      float removed_visits[MAXNN + 1];
      int num_removed = 0;
      for (int i = 0; i < num_edges; i++) {
        if (t.legal[first_edge + i] && !mask[i])
          removed_visits[num_removed++] = t.n[first_edge + i];
      }
      if (num_removed) {
        root.n_total -= static_cast<double>(pairwise_sum(removed_visits, num_removed));
        for (int i = 0; i < num_edges; i++) {
          if (t.legal[first_edge + i] && !mask[i]) {
            t.n[first_edge + i] = t.w[first_edge + i] = t.s[first_edge + i] = 0.0f;
            t.child[first_edge + i] = -1;
          }
        }
      }
      int nlegal = 0;
      root.any_illegal = 1;
      for (int i = 0; i < num_edges; i++) {
        t.legal[first_edge + i] = t.legal[first_edge + i] && mask[i];
        if (!t.legal[first_edge + i]) t.prior[first_edge + i] = 0.0f;
        nlegal += t.legal[first_edge + i];
      }
      const float total =
          pairwise_sum_sparse(&t.prior[first_edge], &t.move[first_edge], num_edges, 0, nn_ + 1);
      if (total > 0) {
        for (int i = 0; i < num_edges; i++)
          t.prior[first_edge + i] = t.prior[first_edge + i] / total;
      } else {
        for (int i = 0; i < num_edges; i++)
          t.prior[first_edge + i] = t.legal[first_edge + i] ? 1.0f / nlegal : 0.0f;
      }
    }
  }
  if (g.noise) {
    int nlegal = 0;
    for (int i = 0; i < num_edges; i++) nlegal += t.legal[first_edge + i];
    // The alpha is 19x19's, scaled by 361 / legal moves: the noise's total concentration
    // (alpha times the number of moves) stays the same on every board and at every stage.
    const double alpha = cfg_.dirichlet_alpha_19 * 361 / std::max(1, nlegal);
    const double fraction = cfg_.noise_fraction;
    if (fraction > 0 && nlegal >= 2) {
      std::vector<double> logs;
      logs.reserve(nlegal);
      double top = -std::numeric_limits<double>::infinity();
      for (int i = 0; i < nlegal; i++) {
        logs.push_back(g.rng.log_gamma_sample(alpha));
        top = std::max(top, logs.back());
      }
      double sum = 0;
      for (double& x : logs) {
        x = std::exp(x - top);
        sum += x;
      }
      g.root_prior.assign(num_edges, 0.0f);
      const float keep = static_cast<float>(1.0 - fraction), frac = static_cast<float>(fraction);
      int j = 0;
      for (int i = 0; i < num_edges; i++) {
        g.root_prior[i] = t.prior[first_edge + i] * keep;
        if (t.legal[first_edge + i]) g.root_prior[i] += frac * static_cast<float>(logs[j++] / sum);
      }
      g.root_noisy = true;
    }
  }
  if (cfg_.search.score_utility_factor > 0) {  // Search.utility: centred on Node.mean_score()
    const float score_sum =
        pairwise_sum_sparse(&t.s[first_edge], &t.move[first_edge], num_edges, 0, nn_ + 1);
    g.centre = (static_cast<double>(root.score) + score_sum) / (1.0 + root.n_total);
  }
  g.reused = root.n_total;
  if (cfg_.search.gumbel)
    g.gumbel.begin(t, cfg_.search.gumbel_cfg, g.target_visits, g.rng, gumbel_utility(g));
  stats.searches++;
  g.phase = PH_SEARCH;
}

}  // namespace kgn
