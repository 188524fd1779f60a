// The board's per-size constant tables (neighbours, diagonals, eye limits, Zobrist keys, the
// 8 symmetries' point maps), built once for every size, and the board's text: GTP vertex
// names and the printed picture.
#include <cstdio>
#include <stdexcept>

#include "board.h"
#include "pymt.h"

namespace kgn {

namespace {

void build(Geometry& g, int n) {
  g.n = n;
  g.nn = n * n;
  for (int p = 0; p < g.nn; p++) {
    int r = p / n, c = p % n;
    // Neighbours in kgrpc/go/geometry.py's order (up, left, right, down): group stone lists
    // and hence every later tie-break follow it.
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
    // An eye tolerates no enemy diagonal on the edge or in the corner, one in the centre.
    g.eye_limit[p] = g.nbc[p] < 4 ? 1 : 2;
  }
  // kgrpc/go/geometry.py's keys: the same Mersenne Twister with the same fixed seed per size,
  // drawn in the same order, so position hashes (and superko histories) agree with Python's.
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

// GTP's column letters: no I (it reads as J or 1).
const char* kColumns = "ABCDEFGHJKLMNOPQRSTUVWXYZ";

}  // namespace

const Geometry& geometry(int n) {
  // Built on first use and never freed: boards of any thread point into it until exit.
  static const AllGeometries* all = new AllGeometries();
  if (n < 2 || n > MAXN) throw std::invalid_argument("board size out of range 2..19");
  return all->g[n];
}

std::string gtp_vertex(int move, int n) {
  if (move == n * n) return "pass";
  int row = move / n, col = move % n;
  return std::string(1, kColumns[col]) + std::to_string(n - row);
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
