// The search's data: the game's own generator (xoshiro256** with its normal and gamma
// draws), the evaluation cache shared by a process's game sets, and the tree's edge storage.
#include <cmath>
#include <mutex>

#include "search.h"
#include "search_internal.h"

namespace kgn {

using namespace search_detail;

// ------------------------------------------------------------------------------ Rng

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

// xoshiro256** (Blackman and Vigna) with its published constants (multipliers 5 and 9,
// rotations 7 and 45, shift 17), its state seeded through SplitMix64 as its authors advise.
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

// Marsaglia's polar method (one of the pair kept: the draws stay a plain function of the state).
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

// A node's edges are one run of the edge arrays, appended at their end (structure of
// arrays: selection reads a node's n, w and priors as contiguous rows); an edge's index stays
// valid until the tree is cleared.
void Tree::set_edges(int32_t node, const int16_t* moves, int num_edges) {
  const size_t first = move.size();
  move.insert(move.end(), moves, moves + num_edges);
  prior.resize(first + num_edges, 0.0f);
  n.resize(first + num_edges, 0.0f);
  w.resize(first + num_edges, 0.0f);
  s.resize(first + num_edges, 0.0f);
  child.resize(first + num_edges, -1);
  legal.resize(first + num_edges, 1);
  vnext.resize(first + num_edges, -2);
  nodes[node].edge0 = static_cast<int32_t>(first);
  nodes[node].nedges = num_edges;
}

size_t Tree::bytes() const {
  return nodes.capacity() * sizeof(Node) + move.capacity() * 2 +
         (prior.capacity() + n.capacity() + w.capacity() + s.capacity()) * 4 +
         child.capacity() * 4 + legal.capacity() + vnext.capacity() * 2;
}

}  // namespace kgn
