#include "search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "features.h"
#include "search_internal.h"


namespace kgn {

using namespace search_detail;

// ------------------------------------------------------------------------------ Rng

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& v : s) v = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Rng::normal() {
  double u, v, r;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    r = u * u + v * v;
  } while (r >= 1.0 || r == 0.0);
  return u * std::sqrt(-2.0 * std::log(r) / r);
}

double Rng::log_gamma_sample(double alpha) {
  // Marsaglia and Tsang; for alpha < 1, Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), kept in
  // logs so that the tiny alphas of 19x19 noise never underflow to zero.
  double boost = 0.0;
  if (alpha < 1.0) {
    double u;
    do u = uniform(); while (u <= 0.0);
    boost = std::log(u) / alpha;
    alpha += 1.0;
  }
  const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    double u = uniform();
    if (u <= 0.0) continue;
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d * v) + boost;
  }
}

// ------------------------------------------------------------------------------ EvalCache

bool EvalCache::lookup(uint64_t key, int nedges, std::vector<float>& priors, float& value,
                       float& score) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end() || static_cast<int>(slots_[it->second].priors.size()) != nedges) {
    misses++;
    return false;
  }
  const Entry& e = slots_[it->second];
  priors.insert(priors.end(), e.priors.begin(), e.priors.end());
  value = e.value;
  score = e.score;
  hits++;
  return true;
}

void EvalCache::insert(uint64_t key, const float* priors, int nedges, float value, float score) {
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.count(key)) return;
  uint32_t slot;
  if (slots_.size() < capacity_) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = static_cast<uint32_t>(next_);
    next_ = (next_ + 1) % capacity_;
    map_.erase(slots_[slot].key);
  }
  Entry& e = slots_[slot];
  e.key = key;
  e.value = value;
  e.score = score;
  e.priors.assign(priors, priors + nedges);
  map_[key] = slot;
}

void EvalCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
  slots_.clear();
  next_ = 0;
}

// ------------------------------------------------------------------------------ Tree

void Tree::set_edges(int32_t node, const int16_t* moves, int k) {
  const size_t e0 = move.size();
  move.insert(move.end(), moves, moves + k);
  prior.resize(e0 + k, 0.0f);
  n.resize(e0 + k, 0.0f);
  w.resize(e0 + k, 0.0f);
  s.resize(e0 + k, 0.0f);
  child.resize(e0 + k, -1);
  legal.resize(e0 + k, 1);
  vnext.resize(e0 + k, -2);
  nodes[node].edge0 = static_cast<int32_t>(e0);
  nodes[node].nedges = k;
}

size_t Tree::bytes() const {
  return nodes.capacity() * sizeof(Node) + move.capacity() * 2 +
         (prior.capacity() + n.capacity() + w.capacity() + s.capacity()) * 4 +
         child.capacity() * 4 + legal.capacity() + vnext.capacity() * 2;
}

// ------------------------------------------------------------------------------ GameSet
// Setting games up, a move's search from its start, and the batch loop (collect, apply).
// Selection is in search_select.cpp, expansion and backup in search_backup.cpp, finishing a
// move and its targets in search_finish.cpp, the Python bindings in module.cpp.

GameSet::GameSet(int size, RulesC rules, double komi, SelfPlayCfg cfg, EvalCache* cache)
    : n_(size), nn_(size * size), rules_(rules), komi_(komi), cfg_(cfg), cache_(cache) {
  geometry(size);  // validates the size
  if (cfg_.search.leaves_per_batch < 1) throw std::invalid_argument("leaves_per_batch must be >= 1");
  if (cfg_.search.visits < 1 || cfg_.cheap_visits < 1)
    throw std::invalid_argument("visits must be >= 1");
  if (!(cfg_.search.score_utility_factor >= 0) || !(cfg_.search.score_utility_scale >= 0))
    throw std::invalid_argument("score_utility_factor and score_utility_scale must be >= 0");
  if (!(cfg_.forced_playouts_k >= 0)) throw std::invalid_argument("forced_playouts_k must be >= 0");
  const GumbelCfg& gc = cfg_.search.gumbel_cfg;
  if (gc.considered < 1 || !(gc.c_visit >= 0) || !(gc.c_scale >= 0) || !(gc.noise_scale >= 0))
    throw std::invalid_argument(
        "gumbel_considered must be >= 1, gumbel_c_visit, gumbel_c_scale and gumbel_scale >= 0");
  if (cfg_.two_models && cache_)
    throw std::invalid_argument("two_models: no evaluation cache (its answers are one model's)");
  if (!(cfg_.opening_policy_prob >= 0 && cfg_.opening_policy_prob <= 1) ||
      !(cfg_.opening_moves >= 0) || !(cfg_.opening_temperature > 0))
    throw std::invalid_argument(
        "opening_policy_prob must be in [0, 1], opening_moves >= 0, opening_temperature > 0");
}

double GameSet::utility_scale() const {
  return cfg_.search.score_utility_scale > 0 ? cfg_.search.score_utility_scale
                                             : static_cast<double>(n_);
}

int64_t GameSet::add_game(uint64_t seed, bool has_sym_seed, uint64_t sym_seed,
                          bool has_white_seed, uint64_t white_sym_seed, bool has_komi,
                          double komi) {
  if (has_komi && !std::isfinite(komi)) throw std::invalid_argument("komi must be finite");
  Game g;
  g.id = next_id_++;
  g.board = Board(n_, rules_, has_komi ? komi : komi_, -1);
  g.rng = Rng(seed);
  g.sym_rng.seed(has_sym_seed ? sym_seed : (g.rng.next() >> 2));
  if (cfg_.two_models) g.sym_rng_other.seed(has_white_seed ? white_sym_seed : (g.rng.next() >> 2));
  const bool resign_on = cfg_.resign_threshold > 0;
  g.may_resign = resign_on && g.rng.uniform() >= cfg_.resign_playout_fraction;
  // kgrpc.mcts.selfplay.opening_length: no draw at all when the setting is off.
  if (cfg_.opening_policy_prob > 0 && g.rng.uniform() < cfg_.opening_policy_prob) {
    double u;
    do u = g.rng.uniform(); while (u <= 0.0);
    g.opening_left = static_cast<int>(-std::log(u) * cfg_.opening_moves);
  }
  g.phase = PH_BEGIN;
  games_.push_back(std::move(g));
  return games_.back().id;
}

int GameSet::active() const { return static_cast<int>(games_.size()); }

size_t GameSet::tree_bytes() const {
  size_t total = 0;
  for (const Game& g : games_) total += g.tree.bytes();
  return total;
}

bool GameSet::is_final(const Board& b) const {
  return b.is_over() || static_cast<int>(b.moves.size()) >= cfg_.max_moves;
}

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
  const int e0 = root.edge0, k = root.nedges;
  const Board& b = g.board;
  bool all = k == nn_ + 1;
  mask.resize(k);
  for (int i = 0; i < k; i++) mask[i] = t.legal[e0 + i];
  if (cfg_.search.sensible_root_moves) {
    bool any_point = false;
    int pass_edge = -1;
    for (int i = 0; i < k; i++) {
      const int mv = t.move[e0 + i];
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
    for (int i = 0; i < k; i++)
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
  const int e0 = root.edge0, k = root.nedges;
  std::vector<uint8_t> mask;
  root_mask(g, mask);
  std::vector<double> weights(k, 0.0);
  double sum = 0, top = 0;
  for (int i = 0; i < k; i++) {
    if (mask[i] && t.legal[e0 + i]) weights[i] = static_cast<double>(t.prior[e0 + i]);
    sum += weights[i];
  }
  if (!(sum > 0)) {
    for (int i = 0; i < k; i++) weights[i] = (mask[i] && t.legal[e0 + i]) ? 1.0 : 0.0;
  }
  for (int i = 0; i < k; i++) top = std::max(top, weights[i]);
  sum = 0;
  for (int i = 0; i < k; i++) {
    weights[i] = top > 0 ? std::pow(weights[i] / top, 1.0 / cfg_.opening_temperature) : 0.0;
    sum += weights[i];
  }
  int chosen = -1;
  double u = g.rng.uniform() * sum;
  for (int i = 0; i < k; i++) {
    if (weights[i] <= 0) continue;
    chosen = i;
    u -= weights[i];
    if (u < 0) break;
  }
  if (chosen < 0) chosen = 0;  // no legal move at all cannot happen: pass is always legal
  const int move = t.move[e0 + chosen];
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
  const int e0 = root.edge0, k = root.nedges;
  std::vector<uint8_t> mask;
  const bool all = root_mask(g, mask);
  if (!all) {
    // Node.restrict(mask)
    bool any = false;
    for (int i = 0; i < k; i++)
      if (t.legal[e0 + i] && mask[i]) any = true;
    if (any) {
      float removed_n[MAXNN + 1];
      int nr = 0;
      for (int i = 0; i < k; i++) {
        if (t.legal[e0 + i] && !mask[i]) removed_n[nr++] = t.n[e0 + i];
      }
      if (nr) {
        root.n_total -= static_cast<double>(pairwise_sum(removed_n, nr));
        for (int i = 0; i < k; i++) {
          if (t.legal[e0 + i] && !mask[i]) {
            t.n[e0 + i] = t.w[e0 + i] = t.s[e0 + i] = 0.0f;
            t.child[e0 + i] = -1;
          }
        }
      }
      int nlegal = 0;
      root.any_illegal = 1;
      for (int i = 0; i < k; i++) {
        t.legal[e0 + i] = t.legal[e0 + i] && mask[i];
        if (!t.legal[e0 + i]) t.prior[e0 + i] = 0.0f;
        nlegal += t.legal[e0 + i];
      }
      const float total = pairwise_sum_sparse(&t.prior[e0], &t.move[e0], k, 0, nn_ + 1);
      if (total > 0) {
        for (int i = 0; i < k; i++) t.prior[e0 + i] = t.prior[e0 + i] / total;
      } else {
        for (int i = 0; i < k; i++) t.prior[e0 + i] = t.legal[e0 + i] ? 1.0f / nlegal : 0.0f;
      }
    }
  }
  if (g.noise) {
    int nlegal = 0;
    for (int i = 0; i < k; i++) nlegal += t.legal[e0 + i];
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
      g.root_prior.assign(k, 0.0f);
      const float keep = static_cast<float>(1.0 - fraction), frac = static_cast<float>(fraction);
      int j = 0;
      for (int i = 0; i < k; i++) {
        g.root_prior[i] = t.prior[e0 + i] * keep;
        if (t.legal[e0 + i]) g.root_prior[i] += frac * static_cast<float>(logs[j++] / sum);
      }
      g.root_noisy = true;
    }
  }
  if (cfg_.search.score_utility_factor > 0) {  // Search.utility: centred on Node.mean_score()
    const float ssum = pairwise_sum_sparse(&t.s[e0], &t.move[e0], k, 0, nn_ + 1);
    g.centre = (static_cast<double>(root.score) + ssum) / (1.0 + root.n_total);
  }
  g.reused = root.n_total;
  if (cfg_.search.gumbel)
    g.gumbel.begin(t, cfg_.search.gumbel_cfg, g.target_visits, g.rng, gumbel_utility(g));
  stats.searches++;
  g.phase = PH_SEARCH;
}

void GameSet::progress(Game& g) {
  for (;;) {
    if (g.phase == PH_BEGIN) {
      begin_move(g);
      continue;
    }
    if (g.phase == PH_SEARCH && search_done(g)) {
      finish_move(g);
      continue;
    }
    return;
  }
}

void GameSet::drop_finished() {
  bool any = false;
  for (const Game& g : games_)
    if (g.phase == PH_DONE) any = true;
  if (!any) return;
  std::vector<Game> keep;
  keep.reserve(games_.size());
  for (Game& g : games_) {
    if (g.phase == PH_DONE) finished_.push_back(std::move(g));
    else keep.push_back(std::move(g));
  }
  games_.swap(keep);
}

int GameSet::collect(uint8_t* planes, float* globals, int max_rows, int8_t* sides) {
  if (max_rows < cfg_.search.leaves_per_batch)
    throw std::invalid_argument("the planes array must hold at least leaves_per_batch rows");
  if (collected_) throw std::logic_error("collect() called again before apply()");
  drop_finished();
  leaves_.clear();
  path_nodes_.clear();
  path_edges_.clear();
  hit_priors_.clear();
  int rows = 0;
  const size_t count = games_.size();
  for (size_t j = 0; j < count; j++) {
    const size_t gi = (rotate_ + j) % count;
    Game& g = games_[gi];
    for (;;) {
      progress(g);
      if (g.phase == PH_ROOT_EVAL) {
        if (rows + 1 > max_rows) break;
        scratch_ = g.board;
        add_leaf(g, static_cast<int32_t>(gi), g.tree.root, scratch_,
                 static_cast<int32_t>(path_nodes_.size()), 0, planes, globals, rows);
        g.phase = PH_WAIT;
        break;
      }
      if (g.phase != PH_SEARCH) break;
      // One round of Search.run: `want` descents with virtual loss.
      // (A Gumbel search spends exactly its budget of new simulations, reused visits aside.)
      const double left = cfg_.search.gumbel ? g.gumbel.budget() - g.gumbel.sims()
                                             : g.target_visits - g.tree.nodes[g.tree.root].n_total;
      const int want = std::min(cfg_.search.leaves_per_batch, static_cast<int>(std::ceil(left)));
      if (rows + want > max_rows) break;
      if (cfg_.search.gumbel) g.gumbel.refresh(g.tree, cfg_.search.gumbel_cfg, gumbel_utility(g));
      bool any_leaf = false;
      for (int d = 0; d < want; d++) {
        scratch_ = g.board;
        const int32_t path0 = static_cast<int32_t>(path_nodes_.size());
        const int32_t leaf = descend(g, scratch_);
        const int32_t plen = static_cast<int32_t>(path_nodes_.size()) - path0;
        const Node& ln = g.tree.nodes[leaf];
        if (ln.state == NODE_TERMINAL) {
          backup(g, path0, plen, ln.value, ln.score);
          path_nodes_.resize(path0);
          path_edges_.resize(path0);
        } else if (ln.state == NODE_PENDING) {  // another path of this round waits for it
          if (cfg_.search.gumbel)
            g.gumbel.undo(path_edges_[path0] - g.tree.nodes[g.tree.root].edge0);
          revert(g, path0, plen);
          path_nodes_.resize(path0);
          path_edges_.resize(path0);
        } else {
          add_leaf(g, static_cast<int32_t>(gi), leaf, scratch_, path0, plen, planes, globals,
                   rows);
          any_leaf = true;
        }
      }
      if (any_leaf) {
        g.phase = PH_WAIT;
        break;
      }
    }
  }
  rotate_ = count ? (rotate_ + 1) % count : 0;
  if (sides) {
    for (const Leaf& leaf : leaves_)
      if (leaf.row >= 0) sides[leaf.row] = leaf.side;
  }
  pending_rows_ = rows;
  collected_ = true;
  stats.nn_evals += static_cast<uint64_t>(rows);
  return rows;
}

void GameSet::apply(const float* policy, const float* value, const float* score, int rows) {
  if (!collected_) throw std::logic_error("apply() without a collect() before it");
  if (rows != pending_rows_)
    throw std::invalid_argument("apply() needs one answer per row of the last collect()");
  std::vector<float> priors;
  const float two_nn = 2.0f * static_cast<float>(nn_);
  for (const Leaf& leaf : leaves_) {
    Game& g = games_[leaf.game];
    float v, s;
    if (leaf.row < 0) {
      v = leaf.hit_value;
      s = leaf.hit_score;
      expand(g, leaf.node, &hit_priors_[leaf.hit0], v, s);
    } else {
      v = value[leaf.row];
      s = score[leaf.row];
      if (std::isnan(v)) v = 0.0f;
      else if (std::isinf(v)) v = v > 0 ? 1.0f : -1.0f;
      if (std::isnan(s)) s = 0.0f;
      else if (std::isinf(s)) s = s > 0 ? two_nn : -two_nn;
      v = std::min(1.0f, std::max(-1.0f, v));
      expand_from_policy(g, leaf.node, policy + static_cast<size_t>(leaf.row) * (nn_ + 1),
                         leaf.sym, v, s, priors);
      if (cache_) cache_->insert(leaf.key, priors.data(), static_cast<int>(priors.size()), v, s);
    }
    if (leaf.node == g.tree.root && leaf.plen == 0) {
      if (g.opening) play_opening_move(g);
      else start_search(g);
    } else {
      backup(g, leaf.path0, leaf.plen, v, s);
    }
  }
  for (Game& g : games_) {
    if (g.phase == PH_WAIT) g.phase = PH_SEARCH;
    progress(g);
  }
  leaves_.clear();
  pending_rows_ = 0;
  collected_ = false;
  drop_finished();
}

}  // namespace kgn
