// The Go board in C++: the same rules, hashing and group bookkeeping as kgrpc/go/board.py
// (the Python module is the reference; tests/test_native_board.py compares the two).
// Implemented by job: board.cpp (legality, play, captures, liberties), board_geometry.cpp
// (per-size tables, vertex names, the text picture), board_setup.cpp (setup, the invariant
// check), board_scoring.cpp (ownership, score).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kgn {

constexpr int MAXN = 19;
constexpr int MAXNN = MAXN * MAXN;

enum KoRule : uint8_t { KO_SIMPLE = 0, KO_POSITIONAL = 1, KO_SITUATIONAL = 2 };

struct RulesC {
  bool territory = false;
  KoRule ko = KO_SIMPLE;
  bool suicide = false;
  bool superko() const { return ko != KO_SIMPLE; }
};

// Per-size constant tables (built once for every size 2..19).
struct Geometry {
  int n = 0, nn = 0;
  int16_t nb[MAXNN][4];
  uint8_t nbc[MAXNN];
  int16_t diag[MAXNN][4];
  uint8_t diagc[MAXNN];
  uint8_t eye_limit[MAXNN];
  uint64_t zb[MAXNN], zw[MAXNN];
  uint64_t z_white_to_play = 0;
  // sym_src[s][j]: the source point of transformed point j (symmetry.apply_planes);
  // sym_dst[s][p]: where point p goes (p == nn, pass, stays).
  int16_t sym_src[8][MAXNN];
  int16_t sym_dst[8][MAXNN + 1];
};

const Geometry& geometry(int n);  // n in 2..19

enum Illegal : uint8_t { LEGAL = 0, OCCUPIED, KO, SUICIDE, SUPERKO };

class Board {
 public:
  const Geometry* geo = nullptr;
  int n = 0, nn = 0;
  RulesC rules;
  double komi = 7.5;
  int max_moves = -1;  // -1: none
  int8_t stones[MAXNN];     // +1 black, -1 white, 0 empty
  uint16_t gid[MAXNN];      // group id (one of its stones), nn for an empty point
  uint16_t gnext[MAXNN];    // next stone of the group, in the Python reference's list order
  uint16_t ghead[MAXNN];    // per group id: first and last stone, size and liberties
  uint16_t gtail[MAXNN];
  uint16_t gsize[MAXNN];
  uint16_t glibs[MAXNN];
  int8_t tp = 1;            // player to move
  int ko_point = -1;
  int consecutive_passes = 0;
  int captures_black = 0, captures_white = 0;
  uint64_t hash = 0;        // stones only
  std::vector<int16_t> moves;
  bool track_seen = false;
  std::vector<uint64_t> seen;  // sorted history keys (superko)

  Board() = default;
  Board(int size, RulesC r, double komi_, int max_moves_);

  Board& operator=(const Board& o);
  Board(const Board& o) { *this = o; }

  bool is_over() const {
    return consecutive_passes >= 2 ||
           (max_moves >= 0 && static_cast<int>(moves.size()) >= max_moves);
  }
  uint64_t position_hash() const { return hash ^ (tp == -1 ? geo->z_white_to_play : 0); }
  uint64_t history_key(uint64_t h, int to_play) const {
    return (rules.ko == KO_SITUATIONAL && to_play == -1) ? h ^ geo->z_white_to_play : h;
  }
  bool seen_contains(uint64_t key) const;
  void seen_insert(uint64_t key);

  Illegal illegal_reason(int p) const;
  bool is_legal(int move) const;
  bool is_eye(int p, int c) const;
  // Legal moves (points then pass) into out; returns the count (0 when the game is over).
  int legal_moves(int16_t* out) const;
  void legal_mask(uint8_t* mask) const;  // nn + 1 entries
  int ko_banned(int16_t* out) const;

  void play_pass();
  // Put a stone of the player to move on p (legality already checked). The points that
  // became empty are appended to freed when it is not null.
  void place(int p, std::vector<int16_t>* freed = nullptr);
  void play_unchecked(int move) {
    if (move == nn) play_pass(); else place(move);
  }

  // Setup (SGF AB/AW): throws std::invalid_argument with the reference's message.
  void set_stones(const std::vector<int>& black, const std::vector<int>& white, int to_play);
  void set_to_play(int color) {
    if (color != tp) {
      tp = static_cast<int8_t>(color);
      ko_point = -1;
    }
  }

  // Ownership after removing dead (null: none). Returns black stones, white stones, black
  // territory, white territory. Throws std::invalid_argument for a bad dead list.
  void regions(const std::vector<int>* dead, int8_t* own, int* counts) const;
  double score(const std::vector<int>* dead = nullptr) const;
  std::string check_invariants() const;  // empty when fine, else what is wrong
  std::string to_string() const;

 private:
  uint64_t resulting_key(int p, bool suicide) const;
  void remove_group(int root, int colour, uint64_t& h, std::vector<int16_t>* freed,
                    int16_t* freed_local, int& nfreed);
  void add_freed_liberties(const int16_t* freed, int nfreed, int colour);
};

std::string gtp_vertex(int move, int n);

}  // namespace kgn
