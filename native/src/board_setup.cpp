// The board rebuilt from its stones or checked against them, by flood fill rather than move
// by move: an SGF setup (AB/AW, kgrpc/go/position_setup.py) and the invariant check the
// differential tests call after moves (kgrpc/go/board_debug.py).
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "board.h"
#include "board_internal.h"

namespace kgn {

void Board::set_stones(const std::vector<int>& black, const std::vector<int>& white,
                       int to_play) {
  // Built aside (the n-prefixed group arrays likewise) and copied in only once the whole
  // setup is known good: a rejected setup leaves the board as it was.
  int8_t st[MAXNN];
  std::memset(st, 0, sizeof(st));
  for (int pass = 0; pass < 2; pass++) {
    const std::vector<int>& pts = pass == 0 ? black : white;
    for (int p : pts) {
      if (p < 0 || p >= nn)
        throw std::invalid_argument("setup point " + std::to_string(p) + " is off a " +
                                    std::to_string(n) + "x" + std::to_string(n) + " board");
      if (st[p]) throw std::invalid_argument("setup point " + gtp_vertex(p, n) + " named twice");
      st[p] = static_cast<int8_t>(pass == 0 ? 1 : -1);
    }
  }
  uint16_t ngid[MAXNN], nnext[MAXNN], nhead[MAXNN], ntail[MAXNN], nsize[MAXNN], nlibs[MAXNN];
  for (int p = 0; p < nn; p++) ngid[p] = static_cast<uint16_t>(nn);
  uint64_t h = 0;
  int16_t stack[MAXNN];
  for (int p = 0; p < nn; p++) {
    int c = st[p];
    if (!c) continue;
    h ^= (c == 1 ? geo->zb : geo->zw)[p];
    if (ngid[p] != nn) continue;
    uint32_t stamp = g_marks.next();
    uint32_t* mark = g_marks.mark;
    int sp = 0, libs = 0, size = 0, last = -1;
    stack[sp++] = static_cast<int16_t>(p);
    ngid[p] = static_cast<uint16_t>(p);
    while (sp) {
      int x = stack[--sp];
      if (last < 0) nhead[p] = static_cast<uint16_t>(x); else nnext[last] = static_cast<uint16_t>(x);
      last = x;
      size++;
      const int16_t* nx = geo->nb[x];
      for (int i = 0, kx = geo->nbc[x]; i < kx; i++) {
        int q = nx[i];
        if (st[q] == 0) {
          if (mark[q] != stamp) {
            mark[q] = stamp;
            libs++;
          }
        } else if (st[q] == c && ngid[q] == nn) {
          ngid[q] = static_cast<uint16_t>(p);
          stack[sp++] = static_cast<int16_t>(q);
        }
      }
    }
    if (!libs)
      throw std::invalid_argument("setup leaves the group at " + gtp_vertex(p, n) +
                                  " without liberties");
    ntail[p] = static_cast<uint16_t>(last);
    nnext[last] = nhead[p];
    nsize[p] = static_cast<uint16_t>(size);
    nlibs[p] = static_cast<uint16_t>(libs);
  }
  const size_t k = static_cast<size_t>(nn);
  std::memcpy(stones, st, k);
  std::memcpy(gid, ngid, k * 2);
  std::memcpy(gnext, nnext, k * 2);
  std::memcpy(ghead, nhead, k * 2);
  std::memcpy(gtail, ntail, k * 2);
  std::memcpy(gsize, nsize, k * 2);
  std::memcpy(glibs, nlibs, k * 2);
  hash = h;
  tp = static_cast<int8_t>(to_play == 1 ? 1 : -1);
  ko_point = -1;
  consecutive_passes = 0;
  if (track_seen) {
    seen.clear();
    seen.push_back(history_key(hash, tp));
  }
}

std::string Board::check_invariants() const {
  bool seen_pt[MAXNN] = {};
  int groups = 0;
  uint64_t h = 0;
  for (int p = 0; p < nn; p++) {
    int c = stones[p];
    if (!c) {
      if (gid[p] != nn) return "empty point " + std::to_string(p) + " has group id " + std::to_string(gid[p]);
      continue;
    }
    h ^= (c == 1 ? geo->zb : geo->zw)[p];
    if (seen_pt[p]) continue;
    int16_t stack[MAXNN], members[MAXNN];
    int sp = 0, nm = 0, libs = 0;
    uint32_t stamp = g_marks.next();
    uint32_t* mark = g_marks.mark;
    stack[sp++] = static_cast<int16_t>(p);
    seen_pt[p] = true;
    while (sp) {
      int x = stack[--sp];
      members[nm++] = static_cast<int16_t>(x);
      for (int i = 0; i < geo->nbc[x]; i++) {
        int q = geo->nb[x][i];
        if (stones[q] == 0) {
          if (mark[q] != stamp) {
            mark[q] = stamp;
            libs++;
          }
        } else if (stones[q] == c && !seen_pt[q]) {
          seen_pt[q] = true;
          stack[sp++] = static_cast<int16_t>(q);
        }
      }
    }
    int root = gid[p];
    for (int i = 0; i < nm; i++)
      if (gid[members[i]] != root) return "group at " + std::to_string(p) + " has mixed ids";
    if (gsize[root] != nm) return "size of group " + std::to_string(root);
    std::vector<int> listed;
    int s = ghead[root];
    for (int m = gsize[root]; m > 0; m--, s = gnext[s]) listed.push_back(s);
    if (listed.back() != gtail[root]) return "tail of group " + std::to_string(root);
    std::vector<int> mem(members, members + nm);
    std::sort(listed.begin(), listed.end());
    std::sort(mem.begin(), mem.end());
    if (listed != mem) return "stones of group " + std::to_string(root);
    if (glibs[root] != libs) return "liberties of group " + std::to_string(root);
    if (!libs) return "group " + std::to_string(root) + " has no liberties";
    groups++;
  }
  if (h != hash) return "stale hash";
  return "";
}

}  // namespace kgn
