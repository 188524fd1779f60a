#include "features.h"

#include <algorithm>
#include <cstring>

namespace kgn {

// kgrpc/schema.py's FEATURE_VERSION and INPUT_FEATURES counts (kgrpc/native.py checks them).
// constexpr here, where the encoder's own arrays are sized by them; declared extern in
// features.h so this definition is the one other files link to.
constexpr int FEATURE_VERSION = 1;
constexpr int NUM_PLANES = 15;
constexpr int NUM_GLOBALS = 8;

void global_features(const Board& b, float* g) {
  g[0] = static_cast<float>((b.tp == -1 ? b.komi : -b.komi) / 20.0);
  g[1] = b.rules.territory ? 1.0f : 0.0f;
  g[2] = b.rules.ko == KO_POSITIONAL ? 1.0f : 0.0f;
  g[3] = b.rules.ko == KO_SITUATIONAL ? 1.0f : 0.0f;
  g[4] = b.rules.suicide ? 1.0f : 0.0f;
  const size_t m = b.moves.size();
  g[5] = (m >= 1 && b.moves[m - 1] == b.nn) ? 1.0f : 0.0f;
  g[6] = (m >= 2 && b.moves[m - 2] == b.nn) ? 1.0f : 0.0f;
  g[7] = static_cast<float>(b.n / 19.0);
}

void encode(const Board& b, uint8_t* planes, float* globals, int sym) {
  const int nn = b.nn;
  const Geometry& geo = *b.geo;
  std::memset(planes, 0, static_cast<size_t>(NUM_PLANES) * nn);
  std::memset(planes, 1, static_cast<size_t>(nn));
  const int16_t* src = geo.sym_src[sym];
  const int16_t* dst = geo.sym_dst[sym];
  const int own = b.tp;
  for (int j = 0; j < nn; j++) {
    const int p = sym ? src[j] : j;
    const int s = b.stones[p];
    if (!s) continue;
    int libs = b.glibs[b.gid[p]];
    if (libs > 3) libs = 3;
    if (s == own) {
      planes[nn + j] = 1;
      planes[(2 + libs) * nn + j] = 1;
    } else {
      planes[2 * nn + j] = 1;
      planes[(5 + libs) * nn + j] = 1;
    }
  }
  int16_t banned[MAXNN];
  const int nb = b.ko_banned(banned);
  for (int i = 0; i < nb; i++) planes[9 * nn + (sym ? dst[banned[i]] : banned[i])] = 1;
  const int m = static_cast<int>(b.moves.size());
  for (int i = 0; i < 5 && i < m; i++) {
    const int mv = b.moves[m - 1 - i];
    if (mv != nn) planes[(10 + i) * nn + (sym ? dst[mv] : mv)] = 1;
  }
  global_features(b, globals);
}

void encode_packed(const Board& b, uint8_t* out) {
  uint8_t planes[NUM_PLANES * MAXNN];
  float g[NUM_GLOBALS];
  encode(b, planes, g, 0);
  const int total = NUM_PLANES * b.nn;
  const int full = total / 8;
  for (int i = 0; i < full; i++) {
    const uint8_t* x = planes + i * 8;
    out[i] = static_cast<uint8_t>((x[0] << 7) | (x[1] << 6) | (x[2] << 5) | (x[3] << 4) |
                                  (x[4] << 3) | (x[5] << 2) | (x[6] << 1) | x[7]);
  }
  if (total % 8) {
    uint8_t v = 0;
    for (int k = 0; k < total % 8; k++) v |= static_cast<uint8_t>(planes[full * 8 + k] << (7 - k));
    out[full] = v;
  }
}

namespace {

int choose(const Board& b, std::vector<int16_t>& empties, PyMT& rng) {
  const int c = b.tp;
  int i = static_cast<int>(empties.size());
  while (i) {
    const int k = static_cast<int>(rng.random() * i);
    const int p = empties[k];
    if (!b.is_eye(p, c) && b.illegal_reason(p) == LEGAL) return k;
    i--;
    std::swap(empties[k], empties[i]);
  }
  return -1;
}

void empty_points(const Board& b, std::vector<int16_t>& out) {
  out.clear();
  for (int p = 0; p < b.nn; p++)
    if (!b.stones[p]) out.push_back(static_cast<int16_t>(p));
}

}  // namespace

int random_move(Board& b, PyMT& rng) {
  std::vector<int16_t> empties;
  empty_points(b, empties);
  const int k = choose(b, empties, rng);
  return k < 0 ? b.nn : empties[k];
}

int random_playout(Board& b, PyMT& rng, long limit) {
  std::vector<int16_t> empties, freed;
  empties.reserve(MAXNN);
  freed.reserve(MAXNN);
  empty_points(b, empties);
  long played = 0;
  while (played < limit && !b.is_over()) {
    const int k = choose(b, empties, rng);
    if (k < 0) {
      b.play_pass();
    } else {
      const int p = empties[k];
      empties[k] = empties.back();
      empties.pop_back();
      freed.clear();
      b.place(p, &freed);
      empties.insert(empties.end(), freed.begin(), freed.end());
    }
    played++;
  }
  return static_cast<int>(played);
}

}  // namespace kgn
