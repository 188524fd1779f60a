// The board's core: construction and copy, legality (ko, suicide, superko through the sorted
// history), passes and stones played with their merges, captures and liberty counts. The
// per-size tables are in board_geometry.cpp, setup and the invariant check in
// board_setup.cpp, ownership and score in board_scoring.cpp.
#include <algorithm>
#include <cstring>

#include "board.h"
#include "board_internal.h"
#include "dcheck.h"

namespace kgn {

using board_detail::contains;

Board::Board(int size, RulesC r, double komi_, int max_moves_)
    : geo(&geometry(size)), n(size), nn(size * size), rules(r), komi(komi_),
      max_moves(max_moves_) {
  std::memset(stones, 0, sizeof(stones));
  for (int p = 0; p < nn; p++) gid[p] = static_cast<uint16_t>(nn);
  track_seen = rules.superko();
  if (track_seen) seen.push_back(history_key(0, 1));
}

// Copies only the nn points in use (not MAXNN): the search copies a board for every descent.
Board& Board::operator=(const Board& o) {
  if (this == &o) return *this;
  geo = o.geo;
  n = o.n;
  nn = o.nn;
  rules = o.rules;
  komi = o.komi;
  max_moves = o.max_moves;
  const size_t k = static_cast<size_t>(nn);
  std::memcpy(stones, o.stones, k);
  std::memcpy(gid, o.gid, k * 2);
  std::memcpy(gnext, o.gnext, k * 2);
  std::memcpy(ghead, o.ghead, k * 2);
  std::memcpy(gtail, o.gtail, k * 2);
  std::memcpy(gsize, o.gsize, k * 2);
  std::memcpy(glibs, o.glibs, k * 2);
  tp = o.tp;
  ko_point = o.ko_point;
  consecutive_passes = o.consecutive_passes;
  captures_black = o.captures_black;
  captures_white = o.captures_white;
  hash = o.hash;
  moves = o.moves;
  track_seen = o.track_seen;
  seen = o.seen;
  return *this;
}

bool Board::seen_contains(uint64_t key) const {
  return std::binary_search(seen.begin(), seen.end(), key);
}

void Board::seen_insert(uint64_t key) {
  auto it = std::lower_bound(seen.begin(), seen.end(), key);
  if (it == seen.end() || *it != key) seen.insert(it, key);
}

// The history key of the position after the player to move puts a stone on p, without
// playing it: the stone's key, less the opponent groups it captures (their last liberty),
// or, for a suicide, less the mover's own groups beside p.
uint64_t Board::resulting_key(int p, bool suicide) const {
  const int c = tp, o = -tp;
  uint64_t h = hash;
  int16_t removed[4];  // roots of the groups that come off
  int num_removed = 0;
  const int16_t* nbs = geo->nb[p];
  const int num_nb = geo->nbc[p];
  if (suicide) {
    for (int i = 0; i < num_nb; i++) {
      int q = nbs[i];
      if (stones[q] == c && !contains(removed, num_removed, gid[q]))
        removed[num_removed++] = static_cast<int16_t>(gid[q]);
    }
    const uint64_t* z = c == 1 ? geo->zb : geo->zw;
    for (int j = 0; j < num_removed; j++) {
      int s = ghead[removed[j]];
      for (int m = gsize[removed[j]]; m > 0; m--, s = gnext[s]) h ^= z[s];
    }
  } else {
    h ^= (c == 1 ? geo->zb : geo->zw)[p];
    for (int i = 0; i < num_nb; i++) {
      int q = nbs[i];
      if (stones[q] == o && glibs[gid[q]] == 1 && !contains(removed, num_removed, gid[q]))
        removed[num_removed++] = static_cast<int16_t>(gid[q]);
    }
    const uint64_t* z = o == 1 ? geo->zb : geo->zw;
    for (int j = 0; j < num_removed; j++) {
      int s = ghead[removed[j]];
      for (int m = gsize[removed[j]]; m > 0; m--, s = gnext[s]) h ^= z[s];
    }
  }
  return history_key(h, o);
}

Illegal Board::illegal_reason(int p) const {
  if (stones[p]) return OCCUPIED;
  if (p == ko_point) return KO;
  const int c = tp;
  // A suicide unless some neighbour is empty, a friendly group with a liberty besides p, or
  // an enemy group that p captures (its last liberty).
  bool suicide = true;
  const int16_t* nbs = geo->nb[p];
  const int num_nb = geo->nbc[p];
  for (int i = 0; i < num_nb; i++) {
    int q = nbs[i];
    int s = stones[q];
    if (s == 0) {
      suicide = false;
    } else if (s == c) {
      if (glibs[gid[q]] > 1) suicide = false;
    } else if (glibs[gid[q]] == 1) {
      suicide = false;
    }
  }
  if (suicide && !rules.suicide) return SUICIDE;
  if (track_seen && seen_contains(resulting_key(p, suicide))) return SUPERKO;
  return LEGAL;
}

bool Board::is_legal(int move) const {
  if (is_over()) return false;
  if (move == nn) return true;
  if (move < 0 || move > nn) return false;
  return illegal_reason(move) == LEGAL;
}

bool Board::is_eye(int p, int c) const {
  if (stones[p]) return false;
  const int16_t* nbs = geo->nb[p];
  for (int i = 0, num_nb = geo->nbc[p]; i < num_nb; i++)
    if (stones[nbs[i]] != c) return false;
  int enemy_diagonals = 0;
  const int16_t* diags = geo->diag[p];
  for (int i = 0, num_diag = geo->diagc[p]; i < num_diag; i++)
    if (stones[diags[i]] == -c) enemy_diagonals++;
  return enemy_diagonals < geo->eye_limit[p];
}

int Board::legal_moves(int16_t* out) const {
  if (is_over()) return 0;
  int count = 0;
  for (int p = 0; p < nn; p++) {
    if (stones[p]) continue;
    bool ok;
    if (!track_seen) {
      // Without superko, an empty point beside an empty point is legal unless it is the ko
      // point: only surrounded points need the group-level test.
      if (p == ko_point) continue;
      ok = false;
      const int16_t* nbs = geo->nb[p];
      for (int i = 0, num_nb = geo->nbc[p]; i < num_nb; i++) {
        if (stones[nbs[i]] == 0) {
          ok = true;
          break;
        }
      }
      if (!ok) ok = illegal_reason(p) == LEGAL;
    } else {
      ok = illegal_reason(p) == LEGAL;
    }
    if (ok) out[count++] = static_cast<int16_t>(p);
  }
  out[count++] = static_cast<int16_t>(nn);
  return count;
}

void Board::legal_mask(uint8_t* mask) const {
  std::memset(mask, 0, static_cast<size_t>(nn) + 1);
  int16_t buf[MAXNN + 1];
  int k = legal_moves(buf);
  for (int i = 0; i < k; i++) mask[buf[i]] = 1;
}

int Board::ko_banned(int16_t* out) const {
  if (!track_seen) {
    if (ko_point >= 0) {
      out[0] = static_cast<int16_t>(ko_point);
      return 1;
    }
    return 0;
  }
  int count = 0;
  for (int p = 0; p < nn; p++) {
    if (stones[p]) continue;
    Illegal r = illegal_reason(p);
    if (r == KO || r == SUPERKO) out[count++] = static_cast<int16_t>(p);
  }
  return count;
}

void Board::play_pass() {
  moves.push_back(static_cast<int16_t>(nn));
  consecutive_passes++;
  ko_point = -1;
  tp = static_cast<int8_t>(-tp);
  if (track_seen) seen_insert(history_key(hash, tp));
}

void Board::remove_group(int root, int colour, uint64_t& h, std::vector<int16_t>* freed,
                         int16_t* freed_local, int& nfreed) {
  const uint64_t* z = colour == 1 ? geo->zb : geo->zw;
  int s = ghead[root];
  for (int m = gsize[root]; m > 0; m--) {
    KGN_DCHECK(stones[s] == colour && gid[s] == root);  // the list holds the group's stones
    int nxt = gnext[s];
    stones[s] = 0;
    gid[s] = static_cast<uint16_t>(nn);
    h ^= z[s];
    freed_local[nfreed++] = static_cast<int16_t>(s);
    if (freed) freed->push_back(static_cast<int16_t>(s));
    s = nxt;
  }
}

// Why: glibs holds each group's exact liberty count, kept up to date move by move rather
// than recounted (place() and the legality checks read it on every move), and
// remove_group() only empties the points, so the groups beside them would still count them
// as occupied. This gives each freed point back as one liberty to every distinct group of
// `colour` beside it (once per group, however many of its stones touch the point). Only
// `colour` gains: a freed point borders no stone of the removed colour, its whole group
// went. After a capture `colour` is the capturer; after a suicide, the opponent.
void Board::add_freed_liberties(const int16_t* freed, int nfreed, int colour) {
  for (int j = 0; j < nfreed; j++) {
    const int point = freed[j];
    KGN_DCHECK(stones[point] == 0);
    int16_t credited[4];  // the groups this point was already given to
    int ncredited = 0;
    const int16_t* nbs = geo->nb[point];
    for (int i = 0, num_nb = geo->nbc[point]; i < num_nb; i++) {
      const int q = nbs[i];
      KGN_DCHECK(stones[q] != -colour);  // the removed colour's whole group went
      if (stones[q] == colour && !contains(credited, ncredited, gid[q])) {
        credited[ncredited++] = static_cast<int16_t>(gid[q]);
        glibs[gid[q]]++;
      }
    }
  }
}

void Board::place(int p, std::vector<int16_t>* freed) {
  KGN_DCHECK(p >= 0 && p < nn && stones[p] == 0);  // the caller checked legality
  const int c = tp, o = -tp;
  const int16_t* nbs = geo->nb[p];
  const int num_nb = geo->nbc[p];
  stones[p] = static_cast<int8_t>(c);
  uint64_t h = hash ^ (c == 1 ? geo->zb : geo->zw)[p];
  // The distinct groups beside p (at most 4 each): the mover's, to merge; the opponent's,
  // each losing the liberty p; and of those, the ones left without any.
  int16_t friends[4], opps[4], dead[4];
  int num_friends = 0, num_opps = 0, num_dead = 0, empties = 0;
  for (int i = 0; i < num_nb; i++) {
    int q = nbs[i];
    int s = stones[q];
    if (s == 0) {
      empties++;
    } else if (s == c) {
      if (!contains(friends, num_friends, gid[q]))
        friends[num_friends++] = static_cast<int16_t>(gid[q]);
    } else {
      int r = gid[q];
      if (!contains(opps, num_opps, r)) {
        opps[num_opps++] = static_cast<int16_t>(r);
        if (--glibs[r] == 0) dead[num_dead++] = static_cast<int16_t>(r);
      }
    }
  }
  int root;
  if (num_friends == 0) {
    root = p;
    gid[p] = static_cast<uint16_t>(p);
    ghead[p] = gtail[p] = static_cast<uint16_t>(p);
    gnext[p] = static_cast<uint16_t>(p);
    gsize[p] = 1;
    glibs[p] = static_cast<uint16_t>(empties);
  } else {
    if (num_friends > 1) {  // the largest group absorbs the others (stable, as the reference sorts)
      for (int i = 1; i < num_friends; i++) {
        int16_t x = friends[i];
        int j = i;
        while (j > 0 && gsize[friends[j - 1]] < gsize[x]) {
          friends[j] = friends[j - 1];
          j--;
        }
        friends[j] = x;
      }
    }
    root = friends[0];
    // Exact liberties of the merged group: the root's, less p, plus every empty neighbour
    // of the other groups and of p that is not already one of the root's liberties.
    int libs = glibs[root] - 1;
    uint32_t stamp = g_marks.next();
    uint32_t* mark = g_marks.mark;
    auto count_new = [&](int q) {
      if (stones[q] != 0 || mark[q] == stamp) return;
      mark[q] = stamp;
      const int16_t* nq = geo->nb[q];
      for (int i = 0, kq = geo->nbc[q]; i < kq; i++)
        if (gid[nq[i]] == root) return;
      libs++;
    };
    for (int f = 1; f < num_friends; f++) {
      int s = ghead[friends[f]];
      for (int m = gsize[friends[f]]; m > 0; m--, s = gnext[s]) {
        const int16_t* ns = geo->nb[s];
        for (int i = 0, ks = geo->nbc[s]; i < ks; i++) count_new(ns[i]);
      }
    }
    for (int i = 0; i < num_nb; i++) count_new(nbs[i]);
    KGN_DCHECK(libs >= 0);
    for (int f = 1; f < num_friends; f++) {
      int r = friends[f];
      int s = ghead[r];
      for (int m = gsize[r]; m > 0; m--, s = gnext[s]) gid[s] = static_cast<uint16_t>(root);
      gnext[gtail[root]] = ghead[r];
      gtail[root] = gtail[r];
      gsize[root] = static_cast<uint16_t>(gsize[root] + gsize[r]);
    }
    gid[p] = static_cast<uint16_t>(root);
    gnext[gtail[root]] = static_cast<uint16_t>(p);
    gtail[root] = static_cast<uint16_t>(p);
    gsize[root]++;
    glibs[root] = static_cast<uint16_t>(libs);
  }
  ko_point = -1;
  if (num_dead) {
    int16_t freed_points[MAXNN];
    int nfreed = 0;
    for (int j = 0; j < num_dead; j++) remove_group(dead[j], o, h, freed, freed_points, nfreed);
    add_freed_liberties(freed_points, nfreed, c);
    if (c == 1) captures_black += nfreed; else captures_white += nfreed;
    // A ko: one stone captured by a lone stone that now has that point as its only liberty.
    if (nfreed == 1 && gsize[root] == 1 && glibs[root] == 1) ko_point = freed_points[0];
  } else if (glibs[root] == 0) {  // suicide (the rules allow it, or we would not be here)
    int16_t freed_points[MAXNN];
    int nfreed = 0;
    remove_group(root, c, h, freed, freed_points, nfreed);
    add_freed_liberties(freed_points, nfreed, o);
    if (o == 1) captures_black += nfreed; else captures_white += nfreed;
  }
  // No group is left without a liberty: p's group has one, or it came off as a suicide.
  KGN_DCHECK(gid[p] == nn || glibs[gid[p]] > 0);
  hash = h;
  moves.push_back(static_cast<int16_t>(p));
  consecutive_passes = 0;
  tp = static_cast<int8_t>(o);
  if (track_seen) seen_insert(history_key(h, o));
}

}  // namespace kgn
