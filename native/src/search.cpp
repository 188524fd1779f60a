#include "search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "features.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace kgn {

// ------------------------------------------------------------------------------ Rng

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t x = h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
  return splitmix64(x);
}
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
      const int32_t e0 = to.nodes[it.dst].edge0;
      for (int i = 0; i < a.nedges; i++) {
        to.prior[e0 + i] = from.prior[a.edge0 + i];
        to.n[e0 + i] = from.n[a.edge0 + i];
        to.w[e0 + i] = from.w[a.edge0 + i];
        to.s[e0 + i] = from.s[a.edge0 + i];
        to.legal[e0 + i] = from.legal[a.edge0 + i];
        to.vnext[e0 + i] = from.vnext[a.edge0 + i];
        const int32_t c = from.child[a.edge0 + i];
        if (c >= 0) {
          const int32_t d = to.add_node();
          to.child[e0 + i] = d;
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

inline double clip1(double x) { return x < -1.0 ? -1.0 : (x > 1.0 ? 1.0 : x); }

// kgrpc.mcts.tree.score_utility, the same expression in the same order (double, libm atan).
inline double score_utility(double factor, double mean, double centre, double scale) {
  return factor * (2.0 / M_PI) * std::atan((mean - centre) / scale);
}

}  // namespace

// ------------------------------------------------------------------------------ GameSet

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

int GameSet::select(const Game& g, int32_t node, bool at_root, bool odd) const {
  const Tree& t = g.tree;
  const Node& nd = t.nodes[node];
  const int e0 = nd.edge0, k = nd.nedges;
  const int16_t* mv = &t.move[e0];
  const float* n = &t.n[e0];
  const float* w = &t.w[e0];
  const uint8_t* legal = &t.legal[e0];
  const float* prior = (at_root && g.root_noisy) ? g.root_prior.data() : &t.prior[e0];
  // float(w.sum()) and prior[visited].sum() over the edges ever visited (the others hold
  // zeros, which change no partial sum of numpy's pairwise order).
  float wv[MAXNN + 1], vis[MAXNN + 1];
  int16_t pos[MAXNN + 1];
  int m = 0, nv = 0;
  for (int cur = nd.vhead; cur >= 0; cur = t.vnext[e0 + cur]) {
    wv[m] = w[cur];
    pos[m++] = mv[cur];
    vis[nv] = prior[cur];
    nv += n[cur] > 0;
  }
  const float wsum = pairwise_sum_sparse(wv, pos, m, 0, nn_ + 1);
  double parent_q = (static_cast<double>(nd.value) + wsum) / (1.0 + nd.n_total);
  const double factor = cfg_.search.score_utility_factor;
  const bool util = factor > 0;
  double centre = 0.0, scale = 1.0;
  if (util) {  // Node.select's utility: the node's own mean score for the first-play urgency
    centre = odd ? -g.centre : g.centre;
    scale = utility_scale();
    const float* s = &t.s[e0];
    m = 0;
    for (int cur = nd.vhead; cur >= 0; cur = t.vnext[e0 + cur]) wv[m++] = s[cur];
    const float ssum = pairwise_sum_sparse(wv, pos, m, 0, nn_ + 1);
    const double mean = (static_cast<double>(nd.score) + ssum) / (1.0 + nd.n_total);
    parent_q += score_utility(factor, mean, centre, scale);
  }
  const float mass = pairwise_sum(vis, nv);
  const double fpu_red = at_root ? cfg_.search.root_fpu_reduction : cfg_.search.fpu_reduction;
  const float fpu = static_cast<float>(parent_q - fpu_red * std::sqrt(static_cast<double>(mass)));
  const float kk = static_cast<float>(cfg_.search.c_puct * std::sqrt(nd.n_total + 1.0));
  // Every edge's score, in float32 exactly as numpy computes it (SIMD lanes round the same
  // way), then numpy's argmax over the legal edges: the first maximum, or the first NaN.
  float sc[MAXNN + 4];
  int i = 0;
  bool nan_seen = false;
  float top = -std::numeric_limits<float>::infinity();
  if (util) {  // q + Node.child_utilities: float32, in numpy's order
    float su[MAXNN + 1];
    std::fill(su, su + k, 0.0f);
    const float* s = &t.s[e0];
    for (int cur = nd.vhead; cur >= 0; cur = t.vnext[e0 + cur]) {
      if (n[cur] > 0)
        su[cur] = static_cast<float>(
            score_utility(factor, static_cast<double>(s[cur] / n[cur]), centre, scale));
    }
    for (; i < k; i++) {
      const float ni = n[i];
      float q = (ni > 0 ? w[i] : fpu) / std::max(ni, 1.0f);
      q = q + su[i];
      sc[i] = legal[i] ? q + prior[i] * (kk / (1.0f + ni))
                       : -std::numeric_limits<float>::infinity();
      if (std::isnan(sc[i])) nan_seen = true;
      else top = std::max(top, sc[i]);
    }
  }
#ifdef __SSE2__
  if (!util) {
    const __m128 vfpu = _mm_set1_ps(fpu), vk = _mm_set1_ps(kk), one = _mm_set1_ps(1.0f);
    const __m128 zero = _mm_setzero_ps(), vninf = _mm_set1_ps(top);
    __m128 vtop = _mm_set1_ps(top), vnan = zero;
    for (; i + 4 <= k; i += 4) {
      const __m128 vn = _mm_loadu_ps(n + i), vw = _mm_loadu_ps(w + i);
      const __m128 vp = _mm_loadu_ps(prior + i);
      const __m128 visited = _mm_cmpgt_ps(vn, zero);
      const __m128 num = _mm_or_ps(_mm_and_ps(visited, vw), _mm_andnot_ps(visited, vfpu));
      const __m128 q = _mm_div_ps(num, _mm_max_ps(vn, one));
      __m128 v = _mm_add_ps(q, _mm_mul_ps(vp, _mm_div_ps(vk, _mm_add_ps(one, vn))));
      int32_t l4;
      std::memcpy(&l4, legal + i, 4);
      const __m128i zi = _mm_setzero_si128();
      __m128i li = _mm_unpacklo_epi8(_mm_cvtsi32_si128(l4), zi);
      li = _mm_unpacklo_epi16(li, zi);
      const __m128 lm = _mm_castsi128_ps(_mm_cmpgt_epi32(li, zi));
      v = _mm_or_ps(_mm_and_ps(lm, v), _mm_andnot_ps(lm, vninf));
      _mm_storeu_ps(sc + i, v);
      vnan = _mm_or_ps(vnan, _mm_cmpunord_ps(v, v));
      vtop = _mm_max_ps(vtop, v);
    }
    float lanes[4];
    _mm_storeu_ps(lanes, vtop);
    for (float x : lanes) top = std::max(top, x);
    nan_seen = _mm_movemask_ps(vnan) != 0;
  }
#endif
  for (; i < k; i++) {
    const float ni = n[i];
    const float q = (ni > 0 ? w[i] : fpu) / std::max(ni, 1.0f);
    sc[i] = legal[i] ? q + prior[i] * (kk / (1.0f + ni))
                     : -std::numeric_limits<float>::infinity();
    if (std::isnan(sc[i])) nan_seen = true;
    else top = std::max(top, sc[i]);
  }
  if (at_root && g.forced) {
    // Node.select's forced playouts: the best score among the visited children short of
    // sqrt(k * prior * n_total) visits (numpy's argmax over them: the first NaN, else the
    // first maximum), when there are any.
    int best = -1;
    float best_score = 0;
    for (int j = 0; j < k; j++) {
      if (!legal[j] || !(n[j] > 0)) continue;
      const double need =
          std::sqrt(cfg_.forced_playouts_k * static_cast<double>(prior[j]) * nd.n_total);
      if (!(static_cast<double>(n[j]) < need)) continue;
      if (std::isnan(sc[j])) return j;
      if (best < 0 || sc[j] > best_score) {
        best = j;
        best_score = sc[j];
      }
    }
    if (best >= 0) return best;
  }
  if (nan_seen) {  // the slow path
    int best = -1;
    float best_score = 0;
    for (int j = 0; j < k; j++) {
      if (!legal[j]) continue;
      if (std::isnan(sc[j])) return j;
      if (best < 0 || sc[j] > best_score) {
        best = j;
        best_score = sc[j];
      }
    }
    return best;
  }
  for (int j = 0; j < k; j++)
    if (sc[j] == top && legal[j]) return j;
  return 0;
}

int32_t GameSet::descend(Game& g, Board& b) {
  Tree& t = g.tree;
  const float vl = static_cast<float>(cfg_.search.virtual_loss);
  int32_t node = t.root;
  bool odd = false;
  while (t.nodes[node].state == NODE_EXPANDED) {
    const int i = cfg_.search.gumbel && node == t.root ? g.gumbel.select()
                                                       : select(g, node, node == t.root, odd);
    odd = !odd;
    Node& nd = t.nodes[node];
    const int e = nd.edge0 + i;
    if (t.vnext[e] == -2) {  // first visit: into the node's visited list, in move order
      int16_t* link = &nd.vhead;
      while (*link >= 0 && *link < i) link = &t.vnext[nd.edge0 + *link];
      t.vnext[e] = *link;
      *link = static_cast<int16_t>(i);
    }
    t.n[e] += vl;
    t.w[e] -= vl;
    nd.n_total += cfg_.search.virtual_loss;
    path_nodes_.push_back(node);
    path_edges_.push_back(e);
    int32_t c = t.child[e];
    b.play_unchecked(t.move[e]);
    if (c < 0) {
      c = t.add_node();
      t.child[e] = c;
    }
    node = c;
    Node& cn = t.nodes[node];
    if (cn.state == NODE_NEW && is_final(b)) {
      const double black = b.score();
      const double mover = b.tp == 1 ? black : -black;
      cn.state = NODE_TERMINAL;
      cn.value = mover > 0 ? 1.0f : (mover < 0 ? -1.0f : 0.0f);
      cn.score = static_cast<float>(mover);
    }
  }
  return node;
}

void GameSet::revert(Game& g, int32_t path0, int32_t plen) {
  Tree& t = g.tree;
  const float vl = static_cast<float>(cfg_.search.virtual_loss);
  for (int32_t i = 0; i < plen; i++) {
    const int32_t e = path_edges_[path0 + i];
    t.n[e] -= vl;
    t.w[e] += vl;
    t.nodes[path_nodes_[path0 + i]].n_total -= cfg_.search.virtual_loss;
  }
}

void GameSet::backup(Game& g, int32_t path0, int32_t plen, double value, double score) {
  Tree& t = g.tree;
  const double vl = cfg_.search.virtual_loss;
  const float dn = static_cast<float>(1.0 - vl);
  double v = value, s = score;
  for (int32_t i = plen - 1; i >= 0; i--) {
    v = -v;
    s = -s;
    const int32_t e = path_edges_[path0 + i];
    t.n[e] += dn;
    t.w[e] += static_cast<float>(v + vl);
    t.s[e] += static_cast<float>(s);
    t.nodes[path_nodes_[path0 + i]].n_total += 1.0 - vl;
  }
  stats.visits++;
}

uint64_t GameSet::position_key(const Board& b) const {
  uint64_t h = b.position_hash();
  int16_t banned[MAXNN];
  const int nb = b.ko_banned(banned);
  for (int i = 0; i < nb; i++) h = mix(h, 1000u + static_cast<uint64_t>(banned[i]));
  const int m = static_cast<int>(b.moves.size());
  for (int i = 0; i < 5; i++) {
    const int mv = i < m ? b.moves[m - 1 - i] : -1;
    h = mix(h, 5000u + static_cast<uint64_t>(mv + 1) * 8u + static_cast<uint64_t>(i));
  }
  uint64_t komi_bits;
  std::memcpy(&komi_bits, &b.komi, 8);
  h = mix(h, komi_bits);
  h = mix(h, (b.rules.territory ? 1u : 0u) | (static_cast<uint64_t>(b.rules.ko) << 1) |
                 (b.rules.suicide ? 8u : 0u) | (static_cast<uint64_t>(b.n) << 4));
  return h;
}

bool GameSet::add_leaf(Game& g, int32_t gi, int32_t node, const Board& b, int32_t path0,
                       int32_t plen, uint8_t* planes, float* globals, int& rows) {
  Tree& t = g.tree;
  int16_t legal[MAXNN + 1];
  const int k = b.legal_moves(legal);
  t.set_edges(node, legal, k);
  t.nodes[node].state = NODE_PENDING;
  const uint64_t pos = cache_ ? position_key(b) : 0;
  int sym = 0;
  if (cfg_.search.random_symmetry)
    sym = cache_ ? static_cast<int>(mix(pos, cache_->salt()) & 7u)
                 : static_cast<int>(g.sym_rng.randbelow(8));
  // The tree searched is the player's to move at the game's root: its model evaluates.
  const int8_t side = cfg_.two_models && g.board.tp != 1 ? 1 : 0;
  Leaf leaf{gi, node, -1, static_cast<int8_t>(sym), side, path0, plen, 0, -1, 0.0f, 0.0f};
  if (cache_) {
    leaf.key = mix(pos, static_cast<uint64_t>(sym) + 1);
    const int32_t h0 = static_cast<int32_t>(hit_priors_.size());
    if (cache_->lookup(leaf.key, k, hit_priors_, leaf.hit_value, leaf.hit_score)) {
      leaf.hit0 = h0;
      stats.cache_hits++;
      leaves_.push_back(leaf);
      return true;
    }
  }
  leaf.row = rows;
  encode(b, planes + static_cast<size_t>(rows) * NUM_PLANES * nn_,
         globals + static_cast<size_t>(rows) * NUM_GLOBALS, sym);
  rows++;
  leaves_.push_back(leaf);
  return true;
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

void GameSet::expand(Game& g, int32_t node, const float* priors, float value, float score) {
  Tree& t = g.tree;
  Node& nd = t.nodes[node];
  std::memcpy(&t.prior[nd.edge0], priors, sizeof(float) * nd.nedges);
  nd.value = value;
  nd.score = score;
  nd.state = NODE_EXPANDED;
}

void GameSet::expand_from_policy(Game& g, int32_t node, const float* policy, int sym, float value,
                                 float score, std::vector<float>& out) {
  Tree& t = g.tree;
  const Node& nd = t.nodes[node];
  const int k = nd.nedges;
  const int16_t* mv = &t.move[nd.edge0];
  const int16_t* dst = geometry(n_).sym_dst[sym];
  out.resize(k);
  for (int i = 0; i < k; i++) out[i] = policy[sym ? dst[mv[i]] : mv[i]];
  const float total = pairwise_sum_sparse(out.data(), mv, k, 0, nn_ + 1);
  if (!std::isfinite(total) || static_cast<double>(total) <= 1e-12) {
    const float u = 1.0f / static_cast<float>(k);
    for (int i = 0; i < k; i++) out[i] = u;
  } else {
    for (int i = 0; i < k; i++) out[i] = out[i] / total;
  }
  expand(g, node, out.data(), value, score);
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

// kgrpc.mcts.search.best_move: most visits, ties to the higher mean value.
int GameSet::best_edge(const Game& g) const {
  const Tree& t = g.tree;
  const Node& root = t.nodes[t.root];
  const int e0 = root.edge0, k = root.nedges;
  int chosen = -1;
  float best_key = 0;
  for (int i = 0; i < k; i++) {
    if (!t.legal[e0 + i]) continue;
    const float ni = t.n[e0 + i];
    const float q = ni > 0 ? t.w[e0 + i] / std::max(ni, 1e-9f) : -2.0f;
    const float key = ni + (0.001f * (q + 2.0f)) / 4.0f;
    if (chosen < 0 || key > best_key) {
      chosen = i;
      best_key = key;
    }
  }
  return chosen;
}

// kgrpc.mcts.search.pruned_visits: the root's visits less the forced playouts that PUCT would
// not have earned, for every child but the best; children left with <= 1 visit get none.
void GameSet::pruned_visits(const Game& g, double* kept) const {
  const Tree& t = g.tree;
  const Node& root = t.nodes[t.root];
  const int e0 = root.edge0, k = root.nedges;
  const float* prior = g.root_noisy ? g.root_prior.data() : &t.prior[e0];
  const double factor = cfg_.search.score_utility_factor;
  const double scale = utility_scale();
  std::vector<double> q(k, 0.0);
  for (int i = 0; i < k; i++) {
    const float ni = t.n[e0 + i];
    kept[i] = static_cast<double>(ni);
    if (!(ni > 0) || !t.legal[e0 + i]) continue;
    q[i] = static_cast<double>(t.w[e0 + i]) / static_cast<double>(ni);
    if (factor > 0) {
      const float su = static_cast<float>(score_utility(
          factor, static_cast<double>(t.s[e0 + i] / ni), g.centre, scale));
      q[i] += static_cast<double>(su);
    }
  }
  const int best = best_edge(g);
  const double explore = cfg_.search.c_puct * std::sqrt(root.n_total + 1.0);
  const double best_puct = q[best] + explore * static_cast<double>(prior[best]) / (1.0 + kept[best]);
  for (int i = 0; i < k; i++) {
    const double ni = kept[i];
    if (i == best || !(ni > 0) || !t.legal[e0 + i]) continue;
    const double gap = best_puct - q[i];
    if (!(gap > 0)) continue;
    const double pi = static_cast<double>(prior[i]);
    const double forced = std::sqrt(cfg_.forced_playouts_k * pi * root.n_total);
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
  const int e0 = root.edge0, k = root.nedges;
  double kept[MAXNN + 1];
  stats.root_visits += static_cast<uint64_t>(root.n_total);
  stats.reused_visits += static_cast<uint64_t>(g.reused);
  const bool pruned = g.forced && cfg_.prune_policy_target;
  if (pruned) pruned_visits(g, kept);
  // policy_target: visited legal moves, visits / their (float32, pairwise) total; or the
  // pruned visits (float64) / their total
  float vis[MAXNN + 1];
  double kvis[MAXNN + 1];
  int idx[MAXNN + 1];
  int nv = 0;
  double total = 0;
  if (pruned) {
    for (int i = 0; i < k; i++) {
      if (kept[i] > 0 && t.legal[e0 + i]) {
        kvis[nv] = kept[i];
        total += kept[i];
        idx[nv++] = i;
      }
    }
  } else {
    for (int i = 0; i < k; i++) {
      if (t.n[e0 + i] > 0 && t.legal[e0 + i]) {
        vis[nv] = t.n[e0 + i];
        kvis[nv] = static_cast<double>(vis[nv]);
        idx[nv++] = i;
      }
    }
    total = pairwise_sum(vis, nv);
  }
  if (total <= 0) throw std::logic_error("the root has no visits");
  if (cfg_.search.gumbel) nv = gumbel_target(g, idx, kvis, total);
  TargetOut target;
  target.full = g.full;
  target.visits = static_cast<int32_t>(root.n_total);
  const float wsum = pairwise_sum_sparse(&t.w[e0], &t.move[e0], k, 0, nn_ + 1);
  const float ssum = pairwise_sum_sparse(&t.s[e0], &t.move[e0], k, 0, nn_ + 1);
  target.root_value = clip1((static_cast<double>(root.value) + wsum) / (1.0 + root.n_total));
  target.root_score = (static_cast<double>(root.score) + ssum) / (1.0 + root.n_total);
  target.policy0 = static_cast<int32_t>(g.policy_moves.size());
  target.policy_len = nv;
  for (int j = 0; j < nv; j++) {
    g.policy_moves.push_back(t.move[e0 + idx[j]]);
    g.policy_probs.push_back(kvis[j] / total);
  }
  // The move: sampled with temperature in the opening, else the most visited.
  int chosen = -1;
  if (cfg_.search.gumbel) {
    chosen = g.gumbel.final_edge();  // already a sample: no temperature on top
  } else if (static_cast<int>(g.board.moves.size()) < cfg_.temperature_moves) {
    double weights[MAXNN + 1];
    double sum = 0, top = 0;
    for (int i = 0; i < k; i++) {
      const double ni = pruned ? kept[i] : static_cast<double>(t.n[e0 + i]);
      weights[i] = t.legal[e0 + i] ? ni : 0.0;
      sum += weights[i];
      top = std::max(top, weights[i]);
    }
    if (sum > 0) {
      if (cfg_.temperature != 1.0) {
        sum = 0;
        for (int i = 0; i < k; i++) {
          weights[i] = std::pow(weights[i] / top, 1.0 / cfg_.temperature);
          sum += weights[i];
        }
      }
      double u = g.rng.uniform() * sum;
      for (int i = 0; i < k; i++) {
        if (weights[i] <= 0) continue;
        chosen = i;
        u -= weights[i];
        if (u < 0) break;
      }
    }
  }
  if (chosen < 0) chosen = best_edge(g);
  const int move = t.move[e0 + chosen];
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
  target.played_visits = static_cast<int32_t>(t.n[e0 + chosen]);
  g.moves.push_back(static_cast<int16_t>(move));
  g.targets.push_back(target);
  g.board.play_unchecked(move);
  stats.moves++;
  // Tree reuse: the played move's subtree becomes the next root.
  const int32_t c = t.child[e0 + chosen];
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

// ------------------------------------------------------------------------------ bindings

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace kgn {

RulesC rules_from(nb::handle rules);  // module.cpp

namespace {

template <class T>
nb::object np_array(const T* src, size_t n) {
  T* data = new T[n ? n : 1];
  if (n) std::memcpy(data, src, n * sizeof(T));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  size_t shape[1] = {n};
  return nb::cast(nb::ndarray<nb::numpy, T>(data, 1, shape, owner));
}

nb::dict finished_dict(const Game& g) {
  const size_t m = g.moves.size();
  std::vector<int32_t> moves(m), visits(m), played(m), offsets(m + 1);
  std::vector<uint8_t> full(m);
  std::vector<double> rv(m), rs(m);
  for (size_t i = 0; i < m; i++) {
    moves[i] = g.moves[i];
    visits[i] = g.targets[i].visits;
    played[i] = g.targets[i].played_visits;
    full[i] = g.targets[i].full;
    rv[i] = g.targets[i].root_value;
    rs[i] = g.targets[i].root_score;
    offsets[i] = g.targets[i].policy0;
  }
  offsets[m] = static_cast<int32_t>(g.policy_moves.size());
  nb::dict d;
  d["id"] = g.id;
  d["moves"] = np_array(moves.data(), m);
  d["full_search"] = np_array(reinterpret_cast<const bool*>(full.data()), m);
  d["visits"] = np_array(visits.data(), m);
  d["played_visits"] = np_array(played.data(), m);
  d["root_value"] = np_array(rv.data(), m);
  d["root_score"] = np_array(rs.data(), m);
  d["policy_offsets"] = np_array(offsets.data(), m + 1);
  d["policy_moves"] = np_array(g.policy_moves.data(), g.policy_moves.size());
  d["policy_probs"] = np_array(g.policy_probs.data(), g.policy_probs.size());
  d["komi"] = g.board.komi;
  d["score"] = g.score;
  d["winner"] = g.winner;
  d["resigned"] = g.resigned;
  d["ownership"] = np_array(g.ownership.data(), g.ownership.size());
  d["would_resign"] = !g.resigned && g.would_resign_color != 0;
  d["false_resignation"] =
      !g.resigned && g.would_resign_color != 0 && g.winner == g.would_resign_color;
  return d;
}

SelfPlayCfg cfg_from(nb::dict d) {
  SelfPlayCfg c;
  SearchCfg& s = c.search;
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "visits") s.visits = nb::cast<int>(v);
    else if (key == "c_puct") s.c_puct = nb::cast<double>(v);
    else if (key == "fpu_reduction") s.fpu_reduction = nb::cast<double>(v);
    else if (key == "root_fpu_reduction") s.root_fpu_reduction = nb::cast<double>(v);
    else if (key == "leaves_per_batch") s.leaves_per_batch = nb::cast<int>(v);
    else if (key == "virtual_loss") s.virtual_loss = nb::cast<double>(v);
    else if (key == "random_symmetry") s.random_symmetry = nb::cast<bool>(v);
    else if (key == "tree_reuse") s.tree_reuse = nb::cast<bool>(v);
    else if (key == "sensible_root_moves") s.sensible_root_moves = nb::cast<bool>(v);
    else if (key == "full_search_prob") c.full_search_prob = nb::cast<double>(v);
    else if (key == "cheap_visits") c.cheap_visits = nb::cast<int>(v);
    else if (key == "temperature_moves") c.temperature_moves = nb::cast<int>(v);
    else if (key == "temperature") c.temperature = nb::cast<double>(v);
    else if (key == "dirichlet_alpha_19") c.dirichlet_alpha_19 = nb::cast<double>(v);
    else if (key == "noise_fraction") c.noise_fraction = nb::cast<double>(v);
    else if (key == "resign_threshold") c.resign_threshold = nb::cast<double>(v);
    else if (key == "resign_consecutive") c.resign_consecutive = nb::cast<int>(v);
    else if (key == "resign_playout_fraction") c.resign_playout_fraction = nb::cast<double>(v);
    else if (key == "max_moves") c.max_moves = nb::cast<int>(v);
    else if (key == "score_utility_factor") s.score_utility_factor = nb::cast<double>(v);
    else if (key == "score_utility_scale") s.score_utility_scale = nb::cast<double>(v);
    else if (key == "forced_playouts_k") c.forced_playouts_k = nb::cast<double>(v);
    else if (key == "prune_policy_target") c.prune_policy_target = nb::cast<bool>(v);
    else if (key == "two_models") c.two_models = nb::cast<bool>(v);
    else if (key == "opening_policy_prob") c.opening_policy_prob = nb::cast<double>(v);
    else if (key == "opening_moves") c.opening_moves = nb::cast<double>(v);
    else if (key == "opening_temperature") c.opening_temperature = nb::cast<double>(v);
    else if (key == "gumbel") s.gumbel = nb::cast<bool>(v);
    else if (key == "gumbel_considered") s.gumbel_cfg.considered = nb::cast<int>(v);
    else if (key == "gumbel_c_visit") s.gumbel_cfg.c_visit = nb::cast<double>(v);
    else if (key == "gumbel_c_scale") s.gumbel_cfg.c_scale = nb::cast<double>(v);
    else if (key == "gumbel_scale") s.gumbel_cfg.noise_scale = nb::cast<double>(v);
    else throw nb::value_error(("unknown game set setting " + key).c_str());
  }
  return c;
}

}  // namespace

void bind_search(nb::module_& m) {
  nb::class_<EvalCache>(m, "EvalCache",
                        "Net outputs by position and symmetry, bounded (oldest out first). "
                        "With random symmetries, a game set using the cache draws each "
                        "position's symmetry from the position and the salt (random when "
                        "omitted), so repeated positions hit.")
      .def(
          "__init__",
          [](EvalCache* self, size_t capacity, nb::handle salt) {
            uint64_t s;
            if (salt.is_none()) {
              std::random_device rd;
              s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
            } else {
              s = nb::cast<uint64_t>(salt);
            }
            new (self) EvalCache(capacity, s);
          },
          "capacity"_a, "salt"_a.none() = nb::none())
      .def_prop_ro("salt", &EvalCache::salt)
      .def_prop_ro("hits", [](const EvalCache& c) { return c.hits; })
      .def_prop_ro("misses", [](const EvalCache& c) { return c.misses; })
      .def_prop_ro("capacity", &EvalCache::capacity)
      .def("__len__", &EvalCache::size)
      .def("clear", &EvalCache::clear);

  nb::class_<GameSet>(m, "GameSet", "Self-play games and their search trees, driven in batches.")
      .def("__init__",
           [](GameSet* self, int size, nb::handle rules, double komi, nb::dict config,
              EvalCache* cache) {
             new (self) GameSet(size, rules_from(rules), komi, cfg_from(config), cache);
           },
           "size"_a, "rules"_a, "komi"_a, "config"_a, "cache"_a.none() = nb::none(),
           nb::keep_alive<1, 6>())
      .def("add_game",
           [](GameSet& gs, uint64_t seed, nb::handle sym_seed, nb::handle white_sym_seed,
              nb::handle komi) {
             const bool has = !sym_seed.is_none(), has_white = !white_sym_seed.is_none();
             const bool has_komi = !komi.is_none();
             return gs.add_game(seed, has, has ? nb::cast<uint64_t>(sym_seed) : 0, has_white,
                                has_white ? nb::cast<uint64_t>(white_sym_seed) : 0, has_komi,
                                has_komi ? nb::cast<double>(komi) : 0.0);
           },
           "seed"_a, "sym_seed"_a = nb::none(), "white_sym_seed"_a = nb::none(),
           "komi"_a = nb::none())
      .def("collect",
           [](GameSet& gs, nb::ndarray<bool, nb::c_contig, nb::device::cpu> planes,
              nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu> globals,
              std::optional<nb::ndarray<int8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>
                  sides) {
             const size_t nn = static_cast<size_t>(gs.size()) * gs.size();
             size_t per_row = 1;
             for (size_t i = 1; i < planes.ndim(); i++) per_row *= planes.shape(i);
             if (planes.ndim() < 2 || per_row != NUM_PLANES * nn)
               throw nb::value_error(("planes must be bool [rows, " + std::to_string(NUM_PLANES) +
                                      ", N, N] (C order)")
                                         .c_str());
             if (globals.shape(1) != NUM_GLOBALS || globals.shape(0) < planes.shape(0))
               throw nb::value_error(
                   ("globals must be float32 [rows, " + std::to_string(NUM_GLOBALS) + "]").c_str());
             const int rows = static_cast<int>(planes.shape(0));
             if (sides && sides->shape(0) < planes.shape(0))
               throw nb::value_error("sides must be int8 [rows]");
             uint8_t* p = reinterpret_cast<uint8_t*>(planes.data());
             float* g = globals.data();
             int8_t* sd = sides ? sides->data() : nullptr;
             nb::gil_scoped_release release;
             return gs.collect(p, g, rows, sd);
           },
           "planes"_a, "globals"_a, "sides"_a = nb::none())
      .def("apply",
           [](GameSet& gs, nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> policy,
              nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> value,
              nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> score) {
             const size_t nn = static_cast<size_t>(gs.size()) * gs.size();
             const size_t rows = value.shape(0);
             if (policy.shape(0) != rows || score.shape(0) != rows || policy.shape(1) != nn + 1)
               throw nb::value_error("apply() needs policy [rows, N*N+1], value and score [rows]");
             {
               nb::gil_scoped_release release;
               gs.apply(policy.data(), value.data(), score.data(), static_cast<int>(rows));
             }
             nb::list out;
             for (const Game& g : gs.take_finished()) out.append(finished_dict(g));
             return out;
           },
           "policy"_a, "value"_a, "score"_a)
      .def_prop_ro("active", &GameSet::active)
      .def_prop_ro("pending_rows", &GameSet::pending_rows)
      .def_prop_ro("tree_bytes", &GameSet::tree_bytes)
      .def_prop_ro("stats", [](const GameSet& gs) {
        nb::dict d;
        d["visits"] = gs.stats.visits;
        d["nn_evals"] = gs.stats.nn_evals;
        d["cache_hits"] = gs.stats.cache_hits;
        d["searches"] = gs.stats.searches;
        d["moves"] = gs.stats.moves;
        d["games"] = gs.stats.games;
        d["root_visits"] = gs.stats.root_visits;
        d["reused_visits"] = gs.stats.reused_visits;
        return d;
      });
}

}  // namespace kgn
