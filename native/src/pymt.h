// Mersenne Twister MT19937 exactly as CPython's `random` module uses it: the same seeding
// (init_by_array over the 32-bit words of the seed), random() (53-bit), getrandbits and
// randrange, and the same 625-word state that random.Random.getstate() exposes. A native
// playout driven by a Python random.Random therefore makes exactly the Python draws.
#pragma once
#include <cstdint>
#include <cstddef>

namespace kgn {

class PyMT {
 public:
  static constexpr int N = 624;
  uint32_t mt[N];
  int mti = N + 1;

  void init_genrand(uint32_t s) {
    mt[0] = s;
    for (mti = 1; mti < N; mti++) {
      mt[mti] = 1812433253U * (mt[mti - 1] ^ (mt[mti - 1] >> 30)) + static_cast<uint32_t>(mti);
    }
  }

  void init_by_array(const uint32_t* key, size_t len) {
    init_genrand(19650218U);
    size_t i = 1, j = 0;
    size_t k = (N > len ? N : len);
    for (; k; k--) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] +
              static_cast<uint32_t>(j);
      i++;
      j++;
      if (i >= N) {
        mt[0] = mt[N - 1];
        i = 1;
      }
      if (j >= len) j = 0;
    }
    for (k = N - 1; k; k--) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) -
              static_cast<uint32_t>(i);
      i++;
      if (i >= N) {
        mt[0] = mt[N - 1];
        i = 1;
      }
    }
    mt[0] = 0x80000000U;
  }

  // random.Random(seed) for a non-negative integer seed below 2**64.
  void seed(uint64_t s) {
    uint32_t key[2] = {static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32)};
    init_by_array(key, key[1] ? 2 : 1);
  }

  uint32_t genrand_uint32() {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y;
    if (mti >= N) {
      int kk;
      for (kk = 0; kk < N - 397; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1U];
      }
      for (; kk < N - 1; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + (397 - N)] ^ (y >> 1) ^ mag01[y & 0x1U];
      }
      y = (mt[N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
      mt[N - 1] = mt[396] ^ (y >> 1) ^ mag01[y & 0x1U];
      mti = 0;
    }
    y = mt[mti++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
  }

  // random.random()
  double random() {
    uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }

  // random.getrandbits(k) for 1 <= k <= 32, and for k = 64.
  uint32_t getrandbits(int k) { return genrand_uint32() >> (32 - k); }
  uint64_t getrandbits64() {
    uint64_t lo = genrand_uint32();
    uint64_t hi = genrand_uint32();
    return lo | (hi << 32);
  }

  // random.randrange(n) for 1 <= n < 2**31 (Random._randbelow_with_getrandbits).
  uint32_t randbelow(uint32_t n) {
    int k = 0;
    for (uint32_t x = n; x; x >>= 1) k++;
    uint32_t r = getrandbits(k);
    while (r >= n) r = getrandbits(k);
    return r;
  }
};

}  // namespace kgn
