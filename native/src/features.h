// Input features (kgrpc/go/features.py, kgrpc.schema.INPUT_FEATURES) and random playouts
// (kgrpc/go/playout.py), bit for bit and draw for draw.
#pragma once
#include <cstdint>
#include <vector>

#include "board.h"
#include "pymt.h"

namespace kgn {

// The encoding's version and counts are defined in features.cpp, beside the encoder they
// describe (so a new plane changes that one C++ file); the module exports them and
// kgrpc/native.py refuses an extension whose values differ from kgrpc/schema.py's.
extern const int FEATURE_VERSION;
extern const int NUM_PLANES;
extern const int NUM_GLOBALS;

inline int packed_row_bytes(int n) { return (NUM_PLANES * n * n + 7) / 8; }

// planes: NUM_PLANES * nn bytes (0/1), in the frame of symmetry sym; globals: NUM_GLOBALS
// floats.
void encode(const Board& b, uint8_t* planes, float* globals, int sym = 0);
void global_features(const Board& b, float* g);
// Packed form: np.packbits(planes.reshape(-1)), big bit order.
void encode_packed(const Board& b, uint8_t* out);

// numpy's pairwise summation (what ndarray.sum() computes for a 1-D float array).
template <class T>
T pairwise_sum(const T* a, long n) {
  if (n < 8) {
    T res = 0;
    for (long i = 0; i < n; i++) res += a[i];
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (int j = 0; j < 8; j++) r[j] = a[j];
    long i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; j++) r[j] += a[i + j];
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
  }
  long n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// The same sum for a dense array of length n that is zero except at the sorted positions
// pos[0..count) (values vals): identical to building the dense array and summing it (adding a
// zero changes no partial sum), in one pass over the non-zero entries.
template <class T, class P>
T pairwise_sum_sparse_at(const T* vals, const P* pos, int count, int& i, long lo, long n) {
  if (n < 8) {
    T res = 0;
    while (i < count && pos[i] < lo + n) res += vals[i++];
    return res;
  }
  if (n <= 128) {
    T r[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const long cut = lo + n - (n % 8);
    for (; i < count && pos[i] < cut; i++) r[(pos[i] - lo) & 7] += vals[i];
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    while (i < count && pos[i] < lo + n) res += vals[i++];
    return res;
  }
  long n2 = n / 2;
  n2 -= n2 % 8;
  const T left = pairwise_sum_sparse_at(vals, pos, count, i, lo, n2);
  const T right = pairwise_sum_sparse_at(vals, pos, count, i, lo + n2, n - n2);
  return left + right;
}

template <class T, class P>
T pairwise_sum_sparse(const T* vals, const P* pos, int count, long lo, long n) {
  int i = 0;
  return pairwise_sum_sparse_at(vals, pos, count, i, lo, n);
}

// Playouts. Both use the Python reference's algorithm and draws (rng must hold the state of
// the random.Random the caller passed).
int random_move(Board& b, PyMT& rng);
int random_playout(Board& b, PyMT& rng, long limit);

}  // namespace kgn
