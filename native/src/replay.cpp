#include "replay.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "features.h"

namespace kgn {

namespace {

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  [[noreturn]] static void bad() { throw std::invalid_argument("malformed GameRecord bytes"); }
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) bad();
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad();
  }
  float fixed32f() {
    if (end - p < 4) bad();
    float f;
    std::memcpy(&f, p, 4);
    p += 4;
    return f;
  }
  Reader sub() {
    uint64_t len = varint();
    if (len > static_cast<uint64_t>(end - p)) bad();
    Reader r{p, p + len};
    p += len;
    return r;
  }
  void skip(int wt) {
    switch (wt) {
      case 0: varint(); break;
      case 1: if (end - p < 8) bad(); p += 8; break;
      case 2: sub(); break;
      case 5: if (end - p < 4) bad(); p += 4; break;
      default: bad();
    }
  }
};

inline int32_t as_i32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// A repeated varint field, packed (wire type 2) or not (0).
template <class F>
bool repeated_varint(Reader& r, int wt, F add) {
  if (wt == 2) {
    Reader s = r.sub();
    while (!s.done()) add(s.varint());
    return true;
  }
  if (wt == 0) {
    add(r.varint());
    return true;
  }
  return false;
}

void parse_rules(Reader r, RecordMsg& out) {
  while (!r.done()) {
    uint64_t key = r.varint();
    int field = static_cast<int>(key >> 3), wt = static_cast<int>(key & 7);
    if (wt == 0 && field == 1) out.scoring = as_i32(r.varint());
    else if (wt == 0 && field == 2) out.ko = as_i32(r.varint());
    else if (wt == 0 && field == 3) out.suicide = r.varint() != 0;
    else r.skip(wt);
  }
}

void parse_target(Reader r, TargetMsg& t) {
  while (!r.done()) {
    uint64_t key = r.varint();
    int field = static_cast<int>(key >> 3), wt = static_cast<int>(key & 7);
    if (field == 1 && wt == 0) {
      t.full_search = r.varint() != 0;
    } else if (field == 2 && wt == 0) {
      t.visits = as_i32(r.varint());
    } else if (field == 3 && repeated_varint(r, wt, [&](uint64_t v) {
                 t.policy_moves.push_back(as_i32(v));
               })) {
    } else if (field == 4 && wt == 2) {
      Reader s = r.sub();
      if ((s.end - s.p) % 4) Reader::bad();
      while (!s.done()) t.policy_probs.push_back(s.fixed32f());
    } else if (field == 4 && wt == 5) {
      t.policy_probs.push_back(r.fixed32f());
    } else if (field == 5 && wt == 5) {
      t.root_value = r.fixed32f();
    } else if (field == 6 && wt == 5) {
      t.root_score = r.fixed32f();
    } else if (field == 7 && wt == 0) {
      t.played_visits = as_i32(r.varint());
    } else {
      r.skip(wt);
    }
  }
}

void parse_result(Reader r, RecordMsg& out) {
  while (!r.done()) {
    uint64_t key = r.varint();
    int field = static_cast<int>(key >> 3), wt = static_cast<int>(key & 7);
    if (field == 1 && wt == 0) {
      out.winner = as_i32(r.varint());
    } else if (field == 2 && wt == 5) {
      out.score = r.fixed32f();
    } else if (field == 3 && repeated_varint(r, wt, [&](uint64_t v) {
                 uint32_t u = static_cast<uint32_t>(v);
                 out.ownership.push_back(static_cast<int32_t>((u >> 1) ^ (~(u & 1) + 1)));
               })) {
    } else if (field == 4 && wt == 0) {
      out.resigned = r.varint() != 0;
    } else {
      r.skip(wt);
    }
  }
}

bool finite(double x) { return std::isfinite(x); }

}  // namespace

void parse_record(const uint8_t* data, size_t len, RecordMsg& out) {
  Reader r{data, data + len};
  while (!r.done()) {
    uint64_t key = r.varint();
    int field = static_cast<int>(key >> 3), wt = static_cast<int>(key & 7);
    if (field == 2 && wt == 2) {
      parse_rules(r.sub(), out);
    } else if (field == 3 && wt == 5) {
      out.komi = r.fixed32f();
    } else if (field == 4 && wt == 0) {
      out.board_size = as_i32(r.varint());
    } else if (field == 7 && repeated_varint(r, wt, [&](uint64_t v) {
                 out.moves.push_back(as_i32(v));
               })) {
    } else if (field == 8 && wt == 2) {
      out.targets.emplace_back();
      parse_target(r.sub(), out.targets.back());
    } else if (field == 9 && wt == 2) {
      parse_result(r.sub(), out);
    } else if (field == 13 && wt == 0) {
      out.format_version = as_i32(r.varint());
    } else {
      r.skip(wt);
    }
  }
}

namespace {

// kgrpc.records.replay._check_target; returns the reason code or nullptr.
const char* check_target(const TargetMsg& t, const Board& b, uint8_t* mark) {
  const auto& pm = t.policy_moves;
  const auto& pp = t.policy_probs;
  if (pm.size() != pp.size()) return "policy_invalid";
  if (pm.empty()) return "policy_invalid";
  const int nn = b.nn;
  for (int32_t m : pm)
    if (m < 0 || m > nn) return "policy_invalid";
  bool dup = false;
  for (int32_t m : pm) {
    if (mark[m]) dup = true;
    mark[m] = 1;
  }
  for (int32_t m : pm) mark[m] = 0;
  if (dup) return "policy_invalid";
  double dense[MAXNN + 1];
  const long k = static_cast<long>(pp.size());
  for (long i = 0; i < k; i++) {
    double v = pp[i];
    if (!finite(v) || v < 0) return "policy_invalid";
    dense[i] = v;
  }
  double total = pairwise_sum(dense, k);
  if (std::fabs(total - 1.0) > 1e-3) return "policy_invalid";
  for (int32_t m : pm)
    if (m != nn && b.illegal_reason(m) != LEGAL) return "policy_invalid";
  double v = t.root_value;
  if (!finite(v) || !(-1.0 <= v && v <= 1.0)) return "value_invalid";
  if (!finite(t.root_score)) return "value_invalid";
  if (t.played_visits < 0 || t.played_visits > std::max(t.visits, 0)) return "policy_invalid";
  return nullptr;
}

// kgrpc.records.replay._check_played: a full search's played move had visits.
const char* check_played(const TargetMsg& t, int32_t move, int32_t format_version) {
  if (!t.full_search) return nullptr;
  if (format_version >= RECORD_FORMAT_PLAYED_VISITS && t.played_visits < 1)
    return "played_move_unvisited";
  if (t.played_visits >= 1) return nullptr;
  double share = 0;
  const size_t k = std::min(t.policy_moves.size(), t.policy_probs.size());
  for (size_t j = 0; j < k; j++)
    if (t.policy_moves[j] == move) share += t.policy_probs[j];
  return share > 0 ? nullptr : "played_move_unvisited";
}

int colour_from_proto(int32_t v) { return v == 1 ? 1 : (v == 2 ? -1 : 0); }

}  // namespace

void replay(const RecordMsg& rec, bool collect, bool check_targets, ReplayOut& out) {
  const int n = rec.board_size;
  if (n < 2 || n > 19) {
    out.reason = "bad_board_size";
    return;
  }
  RulesC rules;
  if (rec.scoring != 1 && rec.scoring != 2) {
    out.reason = "unsupported_rules";
    return;
  }
  if (rec.ko < 1 || rec.ko > 3) {
    out.reason = "unsupported_rules";
    return;
  }
  rules.territory = rec.scoring == 2;
  rules.ko = static_cast<KoRule>(rec.ko - 1);
  rules.suicide = rec.suicide;
  out.rules = rules;
  const double komi = rec.komi;
  const int nn = n * n;
  if (!finite(komi) || std::fabs(komi) > nn) {
    out.reason = "bad_komi";
    return;
  }
  if (rec.targets.size() != rec.moves.size()) {
    out.reason = "targets_mismatch";
    return;
  }
  out.board = Board(n, rules, komi, -1);
  Board& b = out.board;
  uint8_t mark[MAXNN + 1] = {};
  const int rb = packed_row_bytes(n);
  const size_t count = rec.moves.size();
  if (collect) {
    // One allocation per array: growing them row by row re-faulted every page of them.
    size_t rows = 0;
    for (const TargetMsg& t : rec.targets) rows += t.full_search ? 1 : 0;
    out.row_moves.reserve(rows);
    out.states.reserve(rows * rb);
    out.globals.reserve(rows * NUM_GLOBALS);
    out.movers.reserve(rows);
    out.policy.reserve(rows * (nn + 1));
    out.root_value.reserve(rows);
    out.move_values.reserve(count);
    out.move_visits.reserve(count);
    out.move_full.reserve(count);
  }
  for (size_t i = 0; i < count; i++) {
    const TargetMsg& t = rec.targets[i];
    out.move_index = static_cast<int>(i);
    if (b.is_over()) {
      out.reason = "illegal_move";
      return;
    }
    if (check_targets) {
      const char* why = check_target(t, b, mark);
      if (why) {
        out.reason = why;
        return;
      }
    }
    if (collect) {
      out.move_values.push_back(t.root_value);
      out.move_visits.push_back(t.visits);
      out.move_full.push_back(t.full_search ? 1 : 0);
    }
    if (collect && t.full_search) {
      const size_t r = out.row_moves.size();
      out.row_moves.push_back(static_cast<int32_t>(i));
      out.states.resize((r + 1) * rb);
      encode_packed(b, out.states.data() + r * rb);
      out.globals.resize((r + 1) * NUM_GLOBALS);
      global_features(b, out.globals.data() + r * NUM_GLOBALS);
      out.movers.push_back(b.tp);
      out.policy.resize((r + 1) * (nn + 1), 0.0f);
      float* row = out.policy.data() + r * (nn + 1);
      const size_t k = std::min(t.policy_moves.size(), t.policy_probs.size());
      for (size_t j = 0; j < k; j++) {
        int32_t m = t.policy_moves[j];
        if (m >= 0 && m <= nn) row[m] = t.policy_probs[j];
      }
      out.root_value.push_back(t.root_value);
    }
    const int32_t m = rec.moves[i];
    if (m < 0 || m > nn) {
      out.reason = "illegal_move";
      return;
    }
    if (m == nn) {
      b.play_pass();
    } else {
      if (b.illegal_reason(m) != LEGAL) {
        out.reason = "illegal_move";
        return;
      }
      b.place(m);
    }
    if (check_targets) {
      const char* why = check_played(t, m, rec.format_version);
      if (why) {
        out.reason = why;
        return;
      }
    }
  }
  out.move_index = -1;
  out.ownership.resize(nn);
  int cnt[4];
  b.regions(nullptr, out.ownership.data(), cnt);
  out.resigned = rec.resigned;
  if (rec.resigned) {
    const int winner = colour_from_proto(rec.winner);
    if (winner == 0) {
      out.reason = "result_mismatch";
      return;
    }
    // kgrpc.records.replay._check_resignation: not after two passes; the player to move resigned.
    if (b.consecutive_passes >= 2 || winner == b.tp) {
      out.reason = "resign_inconsistent";
      return;
    }
    const double score = rec.score;
    const double limit = nn + std::fabs(komi);
    if (!finite(score) || std::fabs(score) > limit) {
      out.reason = "result_mismatch";
      return;
    }
    if (score * winner < 0) {
      out.reason = "result_mismatch";
      return;
    }
    if (!rec.ownership.empty()) {
      bool ok = static_cast<int>(rec.ownership.size()) == nn;
      for (int32_t o : rec.ownership)
        if (o < -1 || o > 1) ok = false;
      if (!ok) {
        out.reason = "ownership_mismatch";
        return;
      }
    }
    out.score = score;
    out.winner = winner;
  } else {
    const double score = b.score();
    const int winner = score > 0 ? 1 : (score < 0 ? -1 : 0);
    const int recorded = colour_from_proto(rec.winner);
    if (recorded != winner || !(std::fabs(static_cast<double>(rec.score) - score) <= 1e-3)) {
      out.reason = "result_mismatch";
      return;
    }
    if (static_cast<int>(rec.ownership.size()) != nn) {
      out.reason = "ownership_mismatch";
      return;
    }
    for (int p = 0; p < nn; p++) {
      if (rec.ownership[p] != out.ownership[p]) {
        out.reason = "ownership_mismatch";
        return;
      }
    }
    out.score = score;
    out.winner = winner;
  }
}

}  // namespace kgn
