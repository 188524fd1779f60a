#include "board.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "pymt.h"

namespace kgn {

namespace {

// Scratch marks (a stamp per point), one set per thread: boards stay plain copyable data.
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
thread_local Marks g_marks;

void build(Geometry& g, int n) {
  g.n = n;
  g.nn = n * n;
  for (int p = 0; p < g.nn; p++) {
    int r = p / n, c = p % n;
    const int dr[4] = {-1, 0, 0, 1}, dc[4] = {0, -1, 1, 0};
    int k = 0;
    for (int i = 0; i < 4; i++) {
      int rr = r + dr[i], cc = c + dc[i];
      if (rr >= 0 && rr < n && cc >= 0 && cc < n) g.nb[p][k++] = static_cast<int16_t>(rr * n + cc);
    }
    g.nbc[p] = static_cast<uint8_t>(k);
    const int ddr[4] = {-1, -1, 1, 1}, ddc[4] = {-1, 1, -1, 1};
    k = 0;
    for (int i = 0; i < 4; i++) {
      int rr = r + ddr[i], cc = c + ddc[i];
      if (rr >= 0 && rr < n && cc >= 0 && cc < n) g.diag[p][k++] = static_cast<int16_t>(rr * n + cc);
    }
    g.diagc[p] = static_cast<uint8_t>(k);
    g.eye_limit[p] = g.nbc[p] < 4 ? 1 : 2;
  }
  PyMT rng;
  rng.seed(0x5EED0000ULL + static_cast<uint64_t>(n));
  for (int p = 0; p < g.nn; p++) g.zb[p] = rng.getrandbits64();
  for (int p = 0; p < g.nn; p++) g.zw[p] = rng.getrandbits64();
  g.z_white_to_play = rng.getrandbits64();
  // Symmetry sym = 4 * flip + rot: np.rot90 by rot quarter turns, then a transpose.
  for (int s = 0; s < 8; s++) {
    int flip = s / 4, rot = s % 4;
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) {
        int a = flip ? j : i, b = flip ? i : j;  // out[i][j] = y[a][b]
        int si = 0, sj = 0;                      // y[a][b] = m[si][sj]
        switch (rot) {
          case 0: si = a; sj = b; break;
          case 1: si = b; sj = n - 1 - a; break;
          case 2: si = n - 1 - a; sj = n - 1 - b; break;
          default: si = n - 1 - b; sj = a; break;
        }
        g.sym_src[s][i * n + j] = static_cast<int16_t>(si * n + sj);
      }
    }
    for (int j = 0; j < g.nn; j++) g.sym_dst[s][g.sym_src[s][j]] = static_cast<int16_t>(j);
    g.sym_dst[s][g.nn] = static_cast<int16_t>(g.nn);
  }
}

struct AllGeometries {
  Geometry g[MAXN + 1];
  AllGeometries() {
    for (int n = 2; n <= MAXN; n++) build(g[n], n);
  }
};

const char* kColumns = "ABCDEFGHJKLMNOPQRSTUVWXYZ";

inline bool contains(const int16_t* a, int k, int v) {
  for (int i = 0; i < k; i++)
    if (a[i] == v) return true;
  return false;
}

}  // namespace

const Geometry& geometry(int n) {
  static const AllGeometries* all = new AllGeometries();
  if (n < 2 || n > MAXN) throw std::invalid_argument("board size out of range 2..19");
  return all->g[n];
}

std::string gtp_vertex(int move, int n) {
  if (move == n * n) return "pass";
  int row = move / n, col = move % n;
  return std::string(1, kColumns[col]) + std::to_string(n - row);
}

Board::Board(int size, RulesC r, double komi_, int max_moves_)
    : geo(&geometry(size)), n(size), nn(size * size), rules(r), komi(komi_),
      max_moves(max_moves_) {
  std::memset(stones, 0, sizeof(stones));
  for (int p = 0; p < nn; p++) gid[p] = static_cast<uint16_t>(nn);
  track_seen = rules.superko();
  if (track_seen) seen.push_back(history_key(0, 1));
}

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

uint64_t Board::resulting_key(int p, bool suicide) const {
  const int c = tp, o = -tp;
  uint64_t h = hash;
  int16_t roots[4];
  int nr = 0;
  const int16_t* nbp = geo->nb[p];
  const int k = geo->nbc[p];
  if (suicide) {
    for (int i = 0; i < k; i++) {
      int q = nbp[i];
      if (stones[q] == c && !contains(roots, nr, gid[q])) roots[nr++] = static_cast<int16_t>(gid[q]);
    }
    const uint64_t* z = c == 1 ? geo->zb : geo->zw;
    for (int j = 0; j < nr; j++) {
      int s = ghead[roots[j]];
      for (int m = gsize[roots[j]]; m > 0; m--, s = gnext[s]) h ^= z[s];
    }
  } else {
    h ^= (c == 1 ? geo->zb : geo->zw)[p];
    for (int i = 0; i < k; i++) {
      int q = nbp[i];
      if (stones[q] == o && glibs[gid[q]] == 1 && !contains(roots, nr, gid[q]))
        roots[nr++] = static_cast<int16_t>(gid[q]);
    }
    const uint64_t* z = o == 1 ? geo->zb : geo->zw;
    for (int j = 0; j < nr; j++) {
      int s = ghead[roots[j]];
      for (int m = gsize[roots[j]]; m > 0; m--, s = gnext[s]) h ^= z[s];
    }
  }
  return history_key(h, o);
}

Illegal Board::illegal_reason(int p) const {
  if (stones[p]) return OCCUPIED;
  if (p == ko_point) return KO;
  const int c = tp;
  bool suicide = true;
  const int16_t* nbp = geo->nb[p];
  const int k = geo->nbc[p];
  for (int i = 0; i < k; i++) {
    int q = nbp[i];
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
  const int16_t* nbp = geo->nb[p];
  for (int i = 0, k = geo->nbc[p]; i < k; i++)
    if (stones[nbp[i]] != c) return false;
  int bad = 0;
  const int16_t* dp = geo->diag[p];
  for (int i = 0, k = geo->diagc[p]; i < k; i++)
    if (stones[dp[i]] == -c) bad++;
  return bad < geo->eye_limit[p];
}

int Board::legal_moves(int16_t* out) const {
  if (is_over()) return 0;
  int count = 0;
  for (int p = 0; p < nn; p++) {
    if (stones[p]) continue;
    bool ok;
    if (!track_seen) {
      if (p == ko_point) continue;
      ok = false;
      const int16_t* nbp = geo->nb[p];
      for (int i = 0, k = geo->nbc[p]; i < k; i++) {
        if (stones[nbp[i]] == 0) {
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
    int16_t credited[4];  // the groups this point was already given to
    int ncredited = 0;
    const int16_t* nbs = geo->nb[point];
    for (int i = 0, k = geo->nbc[point]; i < k; i++) {
      const int q = nbs[i];
      if (stones[q] == colour && !contains(credited, ncredited, gid[q])) {
        credited[ncredited++] = static_cast<int16_t>(gid[q]);
        glibs[gid[q]]++;
      }
    }
  }
}

void Board::place(int p, std::vector<int16_t>* freed) {
  const int c = tp, o = -tp;
  const int16_t* nbp = geo->nb[p];
  const int k = geo->nbc[p];
  stones[p] = static_cast<int8_t>(c);
  uint64_t h = hash ^ (c == 1 ? geo->zb : geo->zw)[p];
  int16_t friends[4], opps[4], dead[4];
  int nf = 0, no = 0, nd = 0, empties = 0;
  for (int i = 0; i < k; i++) {
    int q = nbp[i];
    int s = stones[q];
    if (s == 0) {
      empties++;
    } else if (s == c) {
      if (!contains(friends, nf, gid[q])) friends[nf++] = static_cast<int16_t>(gid[q]);
    } else {
      int r = gid[q];
      if (!contains(opps, no, r)) {
        opps[no++] = static_cast<int16_t>(r);
        if (--glibs[r] == 0) dead[nd++] = static_cast<int16_t>(r);
      }
    }
  }
  int root;
  if (nf == 0) {
    root = p;
    gid[p] = static_cast<uint16_t>(p);
    ghead[p] = gtail[p] = static_cast<uint16_t>(p);
    gnext[p] = static_cast<uint16_t>(p);
    gsize[p] = 1;
    glibs[p] = static_cast<uint16_t>(empties);
  } else {
    if (nf > 1) {  // the largest group absorbs the others (stable, as the reference sorts)
      for (int i = 1; i < nf; i++) {
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
    uint32_t st = g_marks.next();
    uint32_t* mark = g_marks.mark;
    auto count_new = [&](int q) {
      if (stones[q] != 0 || mark[q] == st) return;
      mark[q] = st;
      const int16_t* nq = geo->nb[q];
      for (int i = 0, kq = geo->nbc[q]; i < kq; i++)
        if (gid[nq[i]] == root) return;
      libs++;
    };
    for (int f = 1; f < nf; f++) {
      int s = ghead[friends[f]];
      for (int m = gsize[friends[f]]; m > 0; m--, s = gnext[s]) {
        const int16_t* ns = geo->nb[s];
        for (int i = 0, ks = geo->nbc[s]; i < ks; i++) count_new(ns[i]);
      }
    }
    for (int i = 0; i < k; i++) count_new(nbp[i]);
    for (int f = 1; f < nf; f++) {
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
  if (nd) {
    int16_t fl[MAXNN];
    int nfreed = 0;
    for (int j = 0; j < nd; j++) remove_group(dead[j], o, h, freed, fl, nfreed);
    add_freed_liberties(fl, nfreed, c);
    if (c == 1) captures_black += nfreed; else captures_white += nfreed;
    if (nfreed == 1 && gsize[root] == 1 && glibs[root] == 1) ko_point = fl[0];
  } else if (glibs[root] == 0) {  // suicide (the rules allow it, or we would not be here)
    int16_t fl[MAXNN];
    int nfreed = 0;
    remove_group(root, c, h, freed, fl, nfreed);
    add_freed_liberties(fl, nfreed, o);
    if (o == 1) captures_black += nfreed; else captures_white += nfreed;
  }
  hash = h;
  moves.push_back(static_cast<int16_t>(p));
  consecutive_passes = 0;
  tp = static_cast<int8_t>(o);
  if (track_seen) seen_insert(history_key(h, o));
}

void Board::set_stones(const std::vector<int>& black, const std::vector<int>& white,
                       int to_play) {
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
  int terr_b = 0, terr_w = 0, nb_b = 0, nb_w = 0;
  for (int start = 0; start < nn; start++) {
    if (colour[start] == 1) nb_b++;
    else if (colour[start] == -1) nb_w++;
    if (colour[start] || seen_pt[start]) continue;
    int len = 0, i = 0, border = 0;
    region[len++] = static_cast<int16_t>(start);
    seen_pt[start] = true;
    while (i < len) {
      int p = region[i++];
      const int16_t* np_ = geo->nb[p];
      for (int j = 0, kp = geo->nbc[p]; j < kp; j++) {
        int q = np_[j];
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
  counts[0] = nb_b;
  counts[1] = nb_w;
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

std::string Board::to_string() const {
  std::string letters;
  for (int c = 0; c < n; c++) {
    if (c) letters += ' ';
    letters += kColumns[c];
  }
  std::string out = "   " + letters;
  for (int r = 0; r < n; r++) {
    char num[16];
    std::snprintf(num, sizeof(num), "%2d", n - r);
    out += "\n";
    out += num;
    out += ' ';
    for (int c = 0; c < n; c++) {
      if (c) out += ' ';
      int s = stones[r * n + c];
      out += s == 0 ? '.' : (s == 1 ? 'X' : 'O');
    }
    out += ' ';
    out += std::to_string(n - r);
  }
  out += "\n   " + letters;
  return out;
}

}  // namespace kgn
