// What the board's files share (board.cpp, board_setup.cpp): scratch marks for flood fills
// and merges, and a membership test over the at most 4 groups beside a point.
#pragma once
#include <cstdint>
#include <cstring>

#include "board.h"

namespace kgn {
namespace board_detail {

// Scratch marks: a stamp per point, so that starting a new fill costs one increment instead
// of clearing MAXNN entries (cleared only when the 32-bit stamp wraps).
struct Marks {
  uint32_t mark[MAXNN] = {};
  uint32_t stamp = 0;
  uint32_t next() {
    if (++stamp == 0) {
      std::memset(mark, 0, sizeof(mark));
      stamp = 1;
    }
    return stamp;
  }
};

// Whether v is among the first k entries of a (k <= 4: a point's neighbours or their groups).
inline bool contains(const int16_t* a, int k, int v) {
  for (int i = 0; i < k; i++)
    if (a[i] == v) return true;
  return false;
}

}  // namespace board_detail

namespace {
// One set of marks per thread (boards stay plain copyable data) and per file that includes
// this header: internal linkage keeps the access in place() as cheap as a file's own
// variable, and the sets never need to agree, since a stamp is only compared within one call.
thread_local board_detail::Marks g_marks;
}  // namespace

}  // namespace kgn
