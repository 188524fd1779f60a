// What the files of the game set's search share (search.cpp, search_begin.cpp,
// search_select.cpp, search_backup.cpp, search_finish.cpp, search_data.cpp): small numeric
// helpers, each the same expression as the Python reference's, and the invariant check of
// debug builds (KGN_DCHECK, dcheck.h).
#pragma once
#include <cmath>
#include <cstdint>

#include "dcheck.h"

namespace kgn {
namespace search_detail {

// SplitMix64's finaliser (Steele et al.): a full-avalanche 64-bit mix; its odd constants are
// the golden-ratio increment and the two published multipliers.
inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Folds v into the hash h (boost::hash_combine's shape, then SplitMix64 so that nearby
// positions land far apart in the evaluation cache).
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t x = h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
  return splitmix64(x);
}

inline double clip1(double x) { return x < -1.0 ? -1.0 : (x > 1.0 ? 1.0 : x); }

// kgrpc.mcts.tree.score_utility, the same expression in the same order (double, libm atan).
inline double score_utility(double factor, double mean, double centre, double scale) {
  return factor * (2.0 / M_PI) * std::atan((mean - centre) / scale);
}

// The index a draw u in [0, sum of the weights) falls on, walking the positive weights in
// order: the opening move's draw and the temperature move's draw, each the same walk as the
// Python reference's. Rounding can leave u >= 0 after the last positive weight, which is
// then the one chosen; -1 when no weight is positive (each caller has its own fallback).
inline int draw_weighted(const double* weights, int num_weights, double u) {
  int chosen = -1;
  for (int i = 0; i < num_weights; i++) {
    if (weights[i] <= 0) continue;
    chosen = i;
    u -= weights[i];
    if (u < 0) break;
  }
  return chosen;
}

}  // namespace search_detail
}  // namespace kgn
