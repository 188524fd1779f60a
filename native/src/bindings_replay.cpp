// Bindings of the record functions: a serialized GameRecord replayed (its rows, targets and
// result as numpy arrays) and the SGF move text of a game.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "features.h"
#include "replay.h"

using namespace nb::literals;

namespace kgn {

namespace {

nb::dict replay_bytes(nb::bytes data, bool collect, bool check_targets) {
  RecordMsg rec;
  ReplayOut out;
  {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(data.c_str());
    size_t len = data.size();
    nb::gil_scoped_release release;
    parse_record(p, len, rec);
    replay(rec, collect, check_targets, out);
  }
  nb::dict d;
  if (!out.reason.empty()) {
    d["reason"] = out.reason;
    d["move"] = out.move_index;
    return d;
  }
  const int nn = out.board.nn;
  const size_t rows = out.row_moves.size();
  nb::object rules = rules_object(out.rules);
  d["reason"] = "";
  d["board"] = nb::cast(PyBoard{out.board, rules});
  d["rules"] = rules;
  d["score"] = out.score;
  d["winner"] = out.winner;
  d["resigned"] = out.resigned;
  d["ownership"] = int8_vector(out.ownership.data(), out.ownership.size());
  if (collect) {
    d["row_moves"] = array_taking(std::move(out.row_moves), {rows});
    d["states"] = array_taking(std::move(out.states),
                               {rows, static_cast<size_t>(packed_row_bytes(out.board.n))});
    d["globals"] = array_taking(std::move(out.globals), {rows, static_cast<size_t>(NUM_GLOBALS)});
    d["movers"] = array_taking(std::move(out.movers), {rows});
    d["policy"] = array_taking(std::move(out.policy), {rows, static_cast<size_t>(nn + 1)});
    d["root_value"] = array_taking(std::move(out.root_value), {rows});
    const size_t moves = out.move_values.size();
    d["move_values"] = array_taking(std::move(out.move_values), {moves});
    d["move_visits"] = array_taking(std::move(out.move_visits), {moves});
    d["move_full"] = array_taking(std::move(out.move_full), {moves});
  }
  return d;
}

// kgrpc.sgf._moves_text_python in C++ (the archive renders every accepted game's SGF, and the
// per-move formatting was the replay pool's largest cost). Same text, byte for byte: the nodes
// are ASCII, so bytes and characters agree everywhere except in ``first`` (the root node, which
// may hold UTF-8 model names), whose length in characters the caller passes.
std::optional<std::string> sgf_moves_text(const std::string& first, size_t first_chars, int size,
                           const std::vector<int64_t>& moves,
                           std::optional<std::vector<double>> values,
                           std::optional<std::vector<int64_t>> visits,
                           std::optional<std::vector<bool>> full) {
  const int64_t nn = static_cast<int64_t>(size) * size;
  const size_t count = moves.size();
  if ((values && values->size() < count) || (visits && visits->size() < count) ||
      (full && full->size() < count))
    throw nb::value_error("values, visits and full must have an entry for every move");
  // C and Python spell non-finite numbers differently ("-nan"): those games take the Python path.
  if (values)
    for (size_t i = 0; i < count; i++)
      if (!std::isfinite((*values)[i])) return std::nullopt;
  std::string out;
  out.reserve(first.size() + count * (values ? 72 : 12) + count / 8 + 8);
  // A root node longer than a line is preceded by an empty line, as the Python wrap does.
  if (first_chars > 78) out += '\n';
  out += first;
  size_t line_chars = first_chars;  // characters on the line being written (the tail of out)
  // One node is at most ";B[aa]KGV[v]KGN[n]KGF[1]C[root value v for B, n visits, full
  // search]" with two numbers of up to 316 characters each: 1 KiB holds it.
  char node[1024];
  for (size_t i = 0; i < count; i++) {
    const int64_t m = moves[i];
    if (m < 0 || m > nn) {
      throw nb::value_error(("move " + std::to_string(m) + " is off a " + std::to_string(size) +
                             "x" + std::to_string(size) + " board")
                                .c_str());
    }
    const char colour = (i & 1) ? 'W' : 'B';
    char* p = node;
    char* const end = node + sizeof node;
    auto put = [&p](const char* text) {
      const size_t len = std::strlen(text);
      std::memcpy(p, text, len);
      p += len;
    };
    // printf's "%.4f" / "%+.3f" in the C locale (std::to_chars is specified to match it).
    auto put_fixed = [&p, end](double v, int precision, bool plus) {
      if (plus && !std::signbit(v)) *p++ = '+';
      p = std::to_chars(p, end, v, std::chars_format::fixed, precision).ptr;
    };
    auto put_int = [&p, end](int64_t v) { p = std::to_chars(p, end, v).ptr; };
    *p++ = ';';
    *p++ = colour;
    *p++ = '[';
    if (m != nn) {
      *p++ = static_cast<char>('a' + m % size);
      *p++ = static_cast<char>('a' + m / size);
    }
    *p++ = ']';
    const bool is_full = full && (*full)[i];
    if (values) {
      const double v = (*values)[i];
      put("KGV[");
      put_fixed(v, 4, false);
      *p++ = ']';
      if (visits) {
        put("KGN[");
        put_int((*visits)[i]);
        *p++ = ']';
      }
      if (is_full) put("KGF[1]");
      put("C[root value ");
      put_fixed(v, 3, true);
      put(" for ");
      *p++ = colour;
      if (visits) {
        put(", ");
        put_int((*visits)[i]);
        put(" visits");
      }
      if (is_full) put(", full search");
      *p++ = ']';
    } else {
      if (visits) {
        put("KGN[");
        put_int((*visits)[i]);
        *p++ = ']';
      }
      if (is_full) put("KGF[1]");
    }
    const size_t len = static_cast<size_t>(p - node);
    if (line_chars + len > 78) {
      out += '\n';
      line_chars = 0;
    }
    out.append(node, len);
    line_chars += len;
  }
  out += ")\n";
  return out;
}

}  // namespace

void bind_replay(nb::module_& m) {
  m.def("replay", &replay_bytes, "data"_a, "collect_features"_a = true,
        "check_targets"_a = true,
        "Replay a serialized GameRecord: a dict with reason '' and the replay's results, or "
        "the reason code (kgrpc.records.errors.REASON_CODES) and the move index.");
  m.def("sgf_moves_text", &sgf_moves_text, "first"_a, "first_chars"_a, "size"_a, "moves"_a,
        "values"_a.none(), "visits"_a.none(), "full"_a.none(),
        "The SGF text from the root node ``first`` on: every move node, lines wrapped at 78 "
        "characters, the closing parenthesis (kgrpc.sgf); None when a value is not finite.");
}

}  // namespace kgn
