// Gumbel root search: see gumbel.h. Every sum runs in edge (move) order in double, and every
// transcendental is libm's log/exp/atan on a double, as kgrpc/mcts/gumbel.py computes them with
// Python floats and the math module: the two searches agree to the last bit.
#include "gumbel.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "search.h"

namespace kgn {

namespace {

// A legal move the net gives no probability keeps a finite logit, far below any other, so the
// softmax of the target stays defined (mctx clamps the prior the same way).
constexpr double kMinPrior = 1e-30;

inline double utility(const QUtility& u, double mean) {
  return u.factor * (2.0 / M_PI) * std::atan((mean - u.centre) / u.scale);
}

}  // namespace

std::vector<int32_t> halving_schedule(int considered, int budget) {
  std::vector<int32_t> out;
  if (budget <= 0) return out;
  out.reserve(budget);
  if (considered <= 1) {  // one action takes every visit
    for (int i = 0; i < budget; i++) out.push_back(i);
    return out;
  }
  int phases = 0;  // ceil(log2(considered)): the halvings that leave one action
  while ((1 << phases) < considered) phases++;
  int alive = considered, level = 0;
  while (static_cast<int>(out.size()) < budget) {
    const int extra = std::max(1, budget / (phases * alive));
    for (int r = 0; r < extra; r++) {
      // The survivors all have `level` visits: each gets one more.
      for (int a = 0; a < alive; a++) out.push_back(level);
      level++;
    }
    // Never fewer than two: the last phase still compares two actions.
    alive = std::max(2, alive / 2);
  }
  out.resize(budget);
  return out;
}

void GumbelRoot::begin(const Tree& t, const GumbelCfg& cfg, int budget, Rng& rng,
                       const QUtility& u) {
  const Node& root = t.nodes[t.root];
  const int e0 = root.edge0;
  k_ = root.nedges;
  legal_.assign(&t.legal[e0], &t.legal[e0] + k_);
  logit_.assign(k_, -std::numeric_limits<double>::infinity());
  base_.assign(k_, -std::numeric_limits<double>::infinity());
  sigma_.assign(k_, 0.0);
  count_.assign(k_, 0);
  std::vector<int16_t> order;
  for (int i = 0; i < k_; i++) {
    if (!legal_[i]) continue;
    logit_[i] = std::log(std::max(static_cast<double>(t.prior[e0 + i]), kMinPrior));
    double g = 0.0;
    if (cfg.noise_scale != 0.0) {
      double x;
      do x = rng.uniform(); while (x <= 0.0);
      g = cfg.noise_scale * -std::log(-std::log(x));
    }
    base_[i] = g + logit_[i];
    order.push_back(static_cast<int16_t>(i));
  }
  assert(!order.empty());  // pass is always legal at a root
  // Gumbel-top-k: the m largest gumbel + logit are a sample of m actions without replacement
  // from softmax(logits). Stable: equal keys keep edge order.
  std::stable_sort(order.begin(), order.end(),
                   [&](int16_t a, int16_t b) { return base_[a] > base_[b]; });
  const int m = std::min<int>(std::max(cfg.considered, 1), static_cast<int>(order.size()));
  considered_.assign(order.begin(), order.begin() + m);
  std::sort(considered_.begin(), considered_.end());
  schedule_ = halving_schedule(m, budget);
  sims_ = 0;
  refresh(t, cfg, u);
}

void GumbelRoot::refresh(const Tree& t, const GumbelCfg& cfg, const QUtility& u) {
  const Node& root = t.nodes[t.root];
  const int e0 = root.edge0;
  assert(root.nedges == k_);
  // Q of the visited edges (the PUCT search's q: float32 w / n, plus the float32 utility).
  std::vector<double> q(k_, 0.0);
  double visits = 0.0, max_visits = 0.0, mass = 0.0, weighted = 0.0;
  for (int i = 0; i < k_; i++) {
    const float n = t.n[e0 + i];
    if (!legal_[i] || !(n > 0)) continue;
    float qi = t.w[e0 + i] / n;
    if (u.factor > 0)
      qi = qi + static_cast<float>(utility(u, static_cast<double>(t.s[e0 + i] / n)));
    q[i] = static_cast<double>(qi);
    const double p = std::max(static_cast<double>(t.prior[e0 + i]), kMinPrior);
    visits += static_cast<double>(n);
    max_visits = std::max(max_visits, static_cast<double>(n));
    mass += p;
    weighted += p * q[i];
  }
  // The mixed value (the paper's Appendix D) completes the unvisited edges: the net's value
  // of the root, mixed with the prior-weighted Q of the visited edges by their visits.
  double raw = static_cast<double>(root.value);
  if (u.factor > 0) raw += utility(u, static_cast<double>(root.score));
  const double mixed = visits > 0 ? (raw + visits * (weighted / mass)) / (visits + 1.0) : raw;
  for (int i = 0; i < k_; i++)
    if (legal_[i] && !(t.n[e0 + i] > 0)) q[i] = mixed;
  // Q onto [0, 1] by the value's bounds, [-1, 1] widened by the score utility's factor: the
  // paper's constants are for Q in [0, 1]. (Not by the Q-values' own range, as mctx does for
  // unbounded rewards: that would blow the noise between near-equal Q-values up to the full
  // scale, 50 logits and more.)
  const double bound = 1.0 + u.factor, lo = -bound, range = 2.0 * bound;
  const double scale = (cfg.c_visit + max_visits) * cfg.c_scale;
  for (int i = 0; i < k_; i++) sigma_[i] = legal_[i] ? scale * ((q[i] - lo) / range) : 0.0;
}

int GumbelRoot::select() {
  assert(sims_ < static_cast<int>(schedule_.size()));
  const int32_t want = schedule_[sims_];
  int best = -1;
  double best_score = 0.0;
  for (int16_t e : considered_) {
    if (count_[e] != want) continue;
    const double score = base_[e] + sigma_[e];
    if (best < 0 || score > best_score) {
      best = e;
      best_score = score;
    }
  }
  // The schedule only asks for counts that some survivor has (it follows their visits).
  assert(best >= 0);
  if (best < 0) best = considered_.front();
  count_[best]++;
  sims_++;
  return best;
}

void GumbelRoot::undo(int edge) {
  assert(edge >= 0 && edge < k_ && count_[edge] > 0 && sims_ > 0);
  count_[edge]--;
  sims_--;
}

int GumbelRoot::final_edge() const {
  int32_t most = -1;
  for (int16_t e : considered_) most = std::max(most, count_[e]);
  int best = -1;
  double best_score = 0.0;
  for (int16_t e : considered_) {
    if (count_[e] != most) continue;
    const double score = base_[e] + sigma_[e];
    if (best < 0 || score > best_score) {
      best = e;
      best_score = score;
    }
  }
  assert(best >= 0);
  return best;
}

void GumbelRoot::improved_policy(std::vector<double>& probs) const {
  probs.assign(k_, 0.0);
  double top = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < k_; i++)
    if (legal_[i]) top = std::max(top, logit_[i] + sigma_[i]);
  double sum = 0.0;
  for (int i = 0; i < k_; i++) {
    if (!legal_[i]) continue;
    probs[i] = std::exp(logit_[i] + sigma_[i] - top);
    sum += probs[i];
  }
  assert(sum >= 1.0);  // the largest term is exp(0)
  for (int i = 0; i < k_; i++) probs[i] = probs[i] / sum;
}

}  // namespace kgn
