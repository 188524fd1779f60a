// Ownership and score (kgrpc/go/counting.py): after the dead stones are taken off, each empty
// region belongs to the colour that alone borders it. Area scoring counts stones and
// territory; territory scoring counts territory, prisoners and the dead stones taken off.
#include <cstring>
#include <stdexcept>

#include "board.h"

namespace kgn {

void Board::regions(const std::vector<int>* dead, int8_t* own, int* counts) const {
  int8_t colour[MAXNN];
  std::memcpy(colour, stones, static_cast<size_t>(nn));
  if (dead) {
    for (int d : *dead) {
      if (d < 0 || d >= nn || colour[d] == 0)
        throw std::invalid_argument("dead stone list names point " + std::to_string(d) +
                                    ", which holds no stone");
      colour[d] = 0;
    }
  }
  std::memcpy(own, colour, static_cast<size_t>(nn));
  bool seen_pt[MAXNN] = {};
  int16_t region[MAXNN];
  int terr_b = 0, terr_w = 0, stones_b = 0, stones_w = 0;
  for (int start = 0; start < nn; start++) {
    if (colour[start] == 1) stones_b++;
    else if (colour[start] == -1) stones_w++;
    if (colour[start] || seen_pt[start]) continue;
    int len = 0, i = 0, border = 0;  // border: bit 1 a black stone beside it, bit 2 white
    region[len++] = static_cast<int16_t>(start);
    seen_pt[start] = true;
    while (i < len) {
      int p = region[i++];
      const int16_t* nbs = geo->nb[p];
      for (int j = 0, num_nb = geo->nbc[p]; j < num_nb; j++) {
        int q = nbs[j];
        int cq = colour[q];
        if (cq == 0) {
          if (!seen_pt[q]) {
            seen_pt[q] = true;
            region[len++] = static_cast<int16_t>(q);
          }
        } else {
          border |= cq == 1 ? 1 : 2;
        }
      }
    }
    if (border == 1 || border == 2) {
      int8_t owner = border == 1 ? 1 : -1;
      if (owner == 1) terr_b += len; else terr_w += len;
      for (int j = 0; j < len; j++) own[region[j]] = owner;
    }
  }
  counts[0] = stones_b;
  counts[1] = stones_w;
  counts[2] = terr_b;
  counts[3] = terr_w;
}

double Board::score(const std::vector<int>* dead) const {
  int8_t own[MAXNN];
  int cnt[4];
  regions(dead, own, cnt);
  if (!rules.territory) return static_cast<double>(cnt[0] + cnt[2] - cnt[1] - cnt[3]) - komi;
  int dead_black = 0, dead_white = 0;
  if (dead) {
    for (int d : *dead) {
      if (stones[d] == 1) dead_black++; else dead_white++;
    }
  }
  int black = cnt[2] + captures_black + dead_white;
  int white = cnt[3] + captures_white + dead_black;
  return static_cast<double>(black - white) - komi;
}

}  // namespace kgn
