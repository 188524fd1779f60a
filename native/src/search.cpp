// The game set: setting games up and the batch loop (collect descends every game and writes
// the leaves' planes, apply expands and backs up the answers and moves the games on). A
// move's start is in search_begin.cpp, selection in search_select.cpp, expansion and backup
// in search_backup.cpp, finishing a move and its targets in search_finish.cpp, the tree,
// cache and generator in search_data.cpp, the Python bindings in bindings_search.cpp.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "search.h"
#include "search_internal.h"

namespace kgn {

using namespace search_detail;

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
  // Each call starts one game further on: when the rows run out before every game has had
  // its leaves, it is not always the same games that wait.
  for (size_t j = 0; j < count; j++) {
    const size_t game_index = (rotate_ + j) % count;
    Game& g = games_[game_index];
    for (;;) {
      progress(g);
      if (g.phase == PH_ROOT_EVAL) {
        if (rows + 1 > max_rows) break;
        scratch_ = g.board;
        add_leaf(g, static_cast<int32_t>(game_index), g.tree.root, scratch_,
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
        const Node& leaf_node = g.tree.nodes[leaf];
        if (leaf_node.state == NODE_TERMINAL) {  // the game's end: its score, no evaluation
          backup(g, path0, plen, leaf_node.value, leaf_node.score);
          path_nodes_.resize(path0);
          path_edges_.resize(path0);
        } else if (leaf_node.state == NODE_PENDING) {  // another path of this round waits for it
          if (cfg_.search.gumbel)
            g.gumbel.undo(path_edges_[path0] - g.tree.nodes[g.tree.root].edge0);
          revert(g, path0, plen);
          path_nodes_.resize(path0);
          path_edges_.resize(path0);
        } else {
          add_leaf(g, static_cast<int32_t>(game_index), leaf, scratch_, path0, plen, planes,
                   globals, rows);
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
      // As the reference (kgrpc.mcts.search): a non-finite answer must not reach the tree,
      // where one NaN leaf makes every value above it NaN. NaN reads as 0, an infinity as
      // the bound (value +-1, score +-2 N*N, beyond any real score).
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
