// Python bindings (nanobind): the module kgrpc_native. kgrpc/native.py loads it; kgrpc/go/*,
// kgrpc/records/replay.py and kgrpc/mcts/gameset.py dispatch to it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>

#include "board.h"
#include "features.h"
#include "replay.h"
#include "search.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kgn {

// ------------------------------------------------------------------------------ helpers

template <class T>
nb::ndarray<nb::numpy, T> new_array(std::initializer_list<size_t> shape, T** data_out) {
  size_t total = 1;
  for (size_t s : shape) total *= s;
  T* data = new T[total ? total : 1]();
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  *data_out = data;
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.begin(), owner);
}

// The array takes the vector's buffer over (no copy): a replay's rows are a few hundred KB per
// game, and copying them into fresh pages cost more than encoding them.
template <class T>
nb::ndarray<nb::numpy, T> array_taking(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  size_t total = 1;
  for (size_t s : shape) total *= s;
  if (v.size() != total) throw std::logic_error("array_taking: size does not match the shape");
  auto* held = new std::vector<T>(std::move(v));
  if (held->empty()) held->resize(1);  // a valid pointer for an empty array
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(held->data(), shape.size(), shape.begin(), owner);
}

long as_index(nb::handle h) {
  PyObject* o = PyNumber_Index(h.ptr());
  if (!o) throw nb::python_error();
  long v = PyLong_AsLong(o);
  Py_DECREF(o);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

std::vector<int> index_list(nb::handle iterable) {
  std::vector<int> out;
  for (nb::handle x : iterable) out.push_back(static_cast<int>(as_index(x)));
  return out;
}

nb::object py_attr(const char* module, const char* name) {
  return nb::module_::import_(module).attr(name);
}

[[noreturn]] void raise_illegal(const std::string& msg) {
  static nb::object* cls = nullptr;
  if (!cls) cls = new nb::object(py_attr("kgrpc.go.board", "IllegalMoveError"));
  PyErr_SetString(cls->ptr(), msg.c_str());
  throw nb::python_error();
}

RulesC rules_from(nb::handle rules) {  // also used by bind_search
  static nb::object* cls = nullptr;
  static nb::object* last = nullptr;  // the presets are singletons: remember the last one
  static RulesC last_rules;
  if (last && last->ptr() == rules.ptr()) return last_rules;
  if (!cls) cls = new nb::object(py_attr("kgrpc.go.rules", "Rules"));
  if (!PyObject_IsInstance(rules.ptr(), cls->ptr())) {
    std::string tname = nb::cast<std::string>(nb::handle(Py_TYPE(rules.ptr())).attr("__name__"));
    throw nb::type_error(("rules must be a Rules, not " + tname).c_str());
  }
  RulesC r;
  std::string scoring = nb::cast<std::string>(rules.attr("scoring"));
  std::string ko = nb::cast<std::string>(rules.attr("ko"));
  r.territory = scoring == "territory";
  r.ko = ko == "positional" ? KO_POSITIONAL : (ko == "situational" ? KO_SITUATIONAL : KO_SIMPLE);
  r.suicide = nb::cast<bool>(rules.attr("suicide"));
  if (!last) last = new nb::object();
  *last = nb::borrow(rules);
  last_rules = r;
  return r;
}

nb::object rules_object(const RulesC& r) {
  static nb::object* cls = nullptr;
  if (!cls) cls = new nb::object(py_attr("kgrpc.go.rules", "Rules"));
  const char* ko = r.ko == KO_SIMPLE ? "simple" : (r.ko == KO_POSITIONAL ? "positional" : "situational");
  return (*cls)(r.territory ? "territory" : "area", ko, r.suicide);
}

// ------------------------------------------------------------------------------ Board

struct PyBoard {
  Board b;
  nb::object rules;
};

const char* reason_text(Illegal r) {
  switch (r) {
    case OCCUPIED: return "occupied";
    case KO: return "ko";
    case SUICIDE: return "suicide";
    case SUPERKO: return "superko";
    default: return "";
  }
}

nb::ndarray<nb::numpy, int8_t> int8_vector(const int8_t* src, size_t n) {
  int8_t* d;
  auto a = new_array<int8_t>({n}, &d);
  std::memcpy(d, src, n);
  return a;
}

std::vector<int> optional_dead(nb::handle dead, bool& given) {
  given = !dead.is_none();
  return given ? index_list(dead) : std::vector<int>();
}

// board.captures: a live {BLACK: n, WHITE: n} mapping, writable like the reference's dict.
struct Captures {
  PyBoard* owner;
  int& at(nb::handle colour) {
    if (nb::borrow(colour).equal(nb::int_(1))) return owner->b.captures_black;
    if (nb::borrow(colour).equal(nb::int_(-1))) return owner->b.captures_white;
    throw nb::key_error(nb::cast<std::string>(nb::repr(colour)).c_str());
  }
  nb::dict dict() const {
    nb::dict d;
    d[nb::int_(1)] = owner->b.captures_black;
    d[nb::int_(-1)] = owner->b.captures_white;
    return d;
  }
};

void bind_board(nb::module_& m) {
  nb::class_<Captures>(m, "Captures", "Stones captured by each colour (live view of a Board)")
      .def("__getitem__", [](Captures& c, nb::handle k) { return c.at(k); })
      .def("__setitem__", [](Captures& c, nb::handle k, int v) { c.at(k) = v; })
      .def("__len__", [](const Captures&) { return 2; })
      .def("__iter__", [](const Captures& c) { return nb::iter(c.dict()); })
      .def("__contains__", [](const Captures& c, nb::handle k) { return c.dict().contains(k); })
      .def("keys", [](const Captures& c) { return c.dict().attr("keys")(); })
      .def("values", [](const Captures& c) { return c.dict().attr("values")(); })
      .def("items", [](const Captures& c) { return c.dict().attr("items")(); })
      .def("get", [](Captures& c, nb::handle k, nb::handle dflt) -> nb::object {
             if (c.dict().contains(k)) return nb::int_(c.at(k));
             return nb::borrow(dflt);
           }, "key"_a, "default"_a = nb::none())
      .def("copy", &Captures::dict)
      .def("__eq__", [](const Captures& c, nb::handle o) { return c.dict().equal(o); })
      .def("__repr__", [](const Captures& c) { return nb::repr(c.dict()); });

  nb::class_<PyBoard>(m, "Board",
                      "The Go board of kgrpc.go.board, in C++ (same API, same answers).")
      .def("__init__",
           [](PyBoard* self, nb::handle size, nb::handle rules, nb::handle komi,
              nb::handle max_moves) {
             long n = as_index(size);
             if (n < 2 || n > 19)
               throw nb::value_error(
                   ("board size " + std::to_string(n) + " out of range 2..19").c_str());
             static nb::object* chinese = nullptr;
             if (rules.is_none() && !chinese)
               chinese = new nb::object(py_attr("kgrpc.go.rules", "CHINESE"));
             nb::object r = rules.is_none() ? *chinese : nb::borrow(rules);
             RulesC rc = rules_from(r);
             PyObject* kf = PyNumber_Float(komi.ptr());
             if (!kf) throw nb::python_error();
             double k = PyFloat_AsDouble(kf);
             nb::object kobj = nb::steal(kf);
             if (k != k || std::fabs(k) > 1000)
               throw nb::value_error(("komi " + nb::cast<std::string>(nb::str(kobj)) +
                                      " is not a sensible number").c_str());
             int mm = max_moves.is_none() ? -1 : static_cast<int>(as_index(max_moves));
             new (self) PyBoard{Board(static_cast<int>(n), rc, k, mm), r};
           },
           "size"_a, "rules"_a = nb::none(), "komi"_a = 7.5, nb::kw_only(),
           "max_moves"_a = nb::none())
      .def_prop_ro("size", [](const PyBoard& s) { return s.b.n; })
      .def_prop_ro("num_points", [](const PyBoard& s) { return s.b.nn; })
      .def_prop_ro("pass_move", [](const PyBoard& s) { return s.b.nn; })
      .def_prop_ro("rules", [](const PyBoard& s) { return s.rules; })
      .def_prop_rw("komi", [](const PyBoard& s) { return s.b.komi; },
                   [](PyBoard& s, double k) { s.b.komi = k; })
      .def_prop_rw("max_moves",
                   [](const PyBoard& s) -> nb::object {
                     if (s.b.max_moves < 0) return nb::none();
                     return nb::int_(s.b.max_moves);
                   },
                   [](PyBoard& s, nb::handle v) {
                     s.b.max_moves = v.is_none() ? -1 : static_cast<int>(as_index(v));
                   },
                   nb::for_setter(nb::arg("value").none()))
      .def_prop_ro("moves",
                   [](const PyBoard& s) {
                     nb::list out;
                     for (int16_t mv : s.b.moves) out.append(nb::int_(mv));
                     return out;
                   })
      .def_prop_rw("consecutive_passes", [](const PyBoard& s) { return s.b.consecutive_passes; },
                   [](PyBoard& s, int v) { s.b.consecutive_passes = v; })
      .def_prop_ro("captures", [](PyBoard& s) { return Captures{&s}; },
                   nb::keep_alive<0, 1>())
      .def_prop_ro("ko_point", [](const PyBoard& s) { return s.b.ko_point; })
      .def_prop_ro("to_play", [](const PyBoard& s) { return static_cast<int>(s.b.tp); })
      .def_prop_ro("stones",
                   [](const PyBoard& s) { return nb::cast(int8_vector(s.b.stones, s.b.nn)); })
      .def_prop_ro("move_number", [](const PyBoard& s) { return s.b.moves.size(); })
      .def("is_over", [](const PyBoard& s) { return s.b.is_over(); })
      .def("position_hash", [](const PyBoard& s) { return s.b.position_hash(); })
      .def("group_liberties",
           [](const PyBoard& s, nb::handle point) {
             long p = as_index(point);
             if (p < 0 || p >= s.b.nn || !s.b.stones[p])
               throw nb::value_error(("no stone at point " + std::to_string(p)).c_str());
             return static_cast<int>(s.b.glibs[s.b.gid[p]]);
           })
      .def("group_stones",
           [](const PyBoard& s, nb::handle point) {
             long p = as_index(point);
             if (p < 0 || p >= s.b.nn || !s.b.stones[p])
               throw nb::value_error(("no stone at point " + std::to_string(p)).c_str());
             nb::list out;
             int root = s.b.gid[p];
             int x = s.b.ghead[root];
             for (int k = s.b.gsize[root]; k > 0; k--, x = s.b.gnext[x]) out.append(x);
             return out;
           })
      .def("copy", [](const PyBoard& s) { return PyBoard{s.b, s.rules}; })
      .def("__copy__", [](const PyBoard& s) { return PyBoard{s.b, s.rules}; })
      .def("__deepcopy__", [](const PyBoard& s, nb::handle) { return PyBoard{s.b, s.rules}; })
      .def("is_legal", [](const PyBoard& s, nb::handle move) {
        return s.b.is_legal(static_cast<int>(std::max(-1L, std::min(as_index(move), 1L << 20))));
      })
      .def("legal_mask",
           [](const PyBoard& s) {
             bool* d;
             auto a = new_array<bool>({static_cast<size_t>(s.b.nn + 1)}, &d);
             s.b.legal_mask(reinterpret_cast<uint8_t*>(d));
             return a;
           })
      .def("legal_moves",
           [](const PyBoard& s) {
             int16_t buf[MAXNN + 1];
             int k = s.b.legal_moves(buf);
             nb::list out;
             for (int i = 0; i < k; i++) out.append(static_cast<int>(buf[i]));
             return out;
           })
      .def("ko_banned",
           [](const PyBoard& s) {
             int16_t buf[MAXNN];
             int k = s.b.ko_banned(buf);
             nb::list out;
             for (int i = 0; i < k; i++) out.append(static_cast<int>(buf[i]));
             return out;
           })
      .def("is_own_eye",
           [](const PyBoard& s, nb::handle move, nb::handle color) {
             long p = as_index(move);
             if (p < 0 || p >= s.b.nn) return false;
             bool black = nb::borrow(color).equal(nb::int_(1));
             return s.b.is_eye(static_cast<int>(p), black ? 1 : -1);
           })
      .def("set_stones",
           [](PyBoard& s, nb::handle black, nb::handle white, nb::handle to_play) {
             bool is_black = nb::borrow(to_play).equal(nb::int_(1));
             s.b.set_stones(index_list(black), index_list(white), is_black ? 1 : -1);
           },
           "black"_a = nb::tuple(), "white"_a = nb::tuple(), "to_play"_a = 1)
      .def("set_to_play",
           [](PyBoard& s, nb::handle color) {
             s.b.set_to_play(nb::borrow(color).equal(nb::int_(1)) ? 1 : -1);
           })
      .def("play",
           [](PyBoard& s, nb::handle move) {
             long mv = as_index(move);
             Board& b = s.b;
             if (b.is_over()) {
               raise_illegal(std::string("game over (") +
                             (b.consecutive_passes >= 2 ? "two consecutive passes"
                                                        : "move cap reached") + ")");
             }
             if (mv == b.nn) {
               b.play_pass();
               return;
             }
             if (mv < 0 || mv >= b.nn)
               raise_illegal("move " + std::to_string(mv) + " is off a " + std::to_string(b.n) +
                             "x" + std::to_string(b.n) + " board");
             Illegal r = b.illegal_reason(static_cast<int>(mv));
             if (r != LEGAL)
               raise_illegal(gtp_vertex(static_cast<int>(mv), b.n) + " is illegal: " + reason_text(r));
             b.place(static_cast<int>(mv));
           })
      .def("ownership",
           [](const PyBoard& s, nb::handle dead) {
             bool given;
             std::vector<int> d = optional_dead(dead, given);
             int8_t own[MAXNN];
             int cnt[4];
             s.b.regions(given ? &d : nullptr, own, cnt);
             return int8_vector(own, s.b.nn);
           },
           "dead"_a = nb::none())
      .def("area_ownership",
           [](const PyBoard& s) {
             int8_t own[MAXNN];
             int cnt[4];
             s.b.regions(nullptr, own, cnt);
             return int8_vector(own, s.b.nn);
           })
      .def("score",
           [](const PyBoard& s, nb::handle dead) {
             bool given;
             std::vector<int> d = optional_dead(dead, given);
             return s.b.score(given ? &d : nullptr);
           },
           "dead"_a = nb::none())
      .def("check_invariants",
           [](const PyBoard& s) {
             std::string why = s.b.check_invariants();
             if (!why.empty()) {
               PyErr_SetString(PyExc_AssertionError, why.c_str());
               throw nb::python_error();
             }
           })
      .def("__str__", [](const PyBoard& s) { return s.b.to_string(); });
}

// ------------------------------------------------------------------------------ functions

// CPython's RandomObject (Modules/_randommodule.c): PyObject_HEAD, int index, uint32_t
// state[624]. Read and written in place when random_state_layout_ok() confirmed the layout on
// this interpreter; otherwise the state travels through getstate()/setstate() tuples.
struct RandomObjectLayout {
  PyObject_HEAD
  int index;
  uint32_t state[PyMT::N];
};

void load_object(nb::handle obj, PyMT& rng) {
  auto* r = reinterpret_cast<RandomObjectLayout*>(obj.ptr());
  std::memcpy(rng.mt, r->state, sizeof(rng.mt));
  rng.mti = r->index;
}

void store_object(nb::handle obj, const PyMT& rng) {
  auto* r = reinterpret_cast<RandomObjectLayout*>(obj.ptr());
  std::memcpy(r->state, rng.mt, sizeof(rng.mt));
  r->index = rng.mti;
}

void load_state(nb::handle state, PyMT& rng) {
  nb::tuple t = nb::borrow<nb::tuple>(state);
  if (t.size() != PyMT::N + 1) throw nb::value_error("random state must hold 625 integers");
  for (int i = 0; i < PyMT::N; i++) rng.mt[i] = nb::cast<uint32_t>(t[i]);
  rng.mti = nb::cast<int>(t[PyMT::N]);
}

nb::tuple dump_state(const PyMT& rng) {
  PyObject* t = PyTuple_New(PyMT::N + 1);
  for (int i = 0; i < PyMT::N; i++) PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLong(rng.mt[i]));
  PyTuple_SET_ITEM(t, PyMT::N, PyLong_FromLong(rng.mti));
  return nb::steal<nb::tuple>(t);
}

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

void bind_functions(nb::module_& m) {
  m.def("encode_flat",
        [](const PyBoard& s, int sym) {
          const Board& b = s.b;
          bool* planes;
          float* g;
          auto pa = new_array<bool>({static_cast<size_t>(NUM_PLANES), static_cast<size_t>(b.nn)},
                                    &planes);
          auto ga = new_array<float>({static_cast<size_t>(NUM_GLOBALS)}, &g);
          encode(b, reinterpret_cast<uint8_t*>(planes), g, sym & 7);
          return nb::make_tuple(pa, ga);
        },
        "board"_a, "sym"_a = 0,
        "bool [NUM_PLANES, N*N] planes and float32 [NUM_GLOBALS] globals (features.py)");
  m.def("encode_packed",
        [](const PyBoard& s) {
          uint8_t* d;
          auto a = new_array<uint8_t>({static_cast<size_t>(packed_row_bytes(s.b.n))}, &d);
          encode_packed(s.b, d);
          return a;
        });
  m.def("global_features",
        [](const PyBoard& s) {
          float* g;
          auto a = new_array<float>({static_cast<size_t>(NUM_GLOBALS)}, &g);
          global_features(s.b, g);
          return a;
        });
  m.def("random_playout",
        [](PyBoard& s, nb::handle state, long limit) {
          PyMT rng;
          load_state(state, rng);
          int played = random_playout(s.b, rng, limit);
          return nb::make_tuple(played, dump_state(rng));
        },
        "board"_a, "state"_a, "limit"_a,
        "Random playout drawing from a random.Random state (getstate()[1]); returns (moves "
        "played, new state)");
  m.def("random_playout_inplace",
        [](PyBoard& s, nb::handle random_obj, long limit) {
          PyMT rng;
          load_object(random_obj, rng);
          int played = random_playout(s.b, rng, limit);
          store_object(random_obj, rng);
          return played;
        },
        "board"_a, "rng"_a, "limit"_a,
        "random_playout drawing from (and advancing) a random.Random in place; only after "
        "random_layout_matches(rng) said True on this interpreter");
  m.def("random_move_inplace",
        [](PyBoard& s, nb::handle random_obj) {
          PyMT rng;
          load_object(random_obj, rng);
          int mv = random_move(s.b, rng);
          store_object(random_obj, rng);
          return mv;
        });
  m.def("random_layout_matches",
        [](nb::handle random_obj, nb::handle state) {
          // state = random_obj.getstate()[1]: the in-place view must read the same words.
          PyMT a, b;
          load_object(random_obj, a);
          load_state(state, b);
          return a.mti == b.mti && std::memcmp(a.mt, b.mt, sizeof(a.mt)) == 0;
        });
  m.def("random_move",
        [](PyBoard& s, nb::handle state) {
          PyMT rng;
          load_state(state, rng);
          int mv = random_move(s.b, rng);
          return nb::make_tuple(mv, dump_state(rng));
        });
  m.def("symmetry_maps",
        [](int n) {
          const Geometry& g = geometry(n);
          int16_t *src, *dst;
          auto a = new_array<int16_t>({8, static_cast<size_t>(g.nn)}, &src);
          auto b = new_array<int16_t>({8, static_cast<size_t>(g.nn + 1)}, &dst);
          for (int s = 0; s < 8; s++) {
            std::memcpy(src + s * g.nn, g.sym_src[s], g.nn * 2);
            std::memcpy(dst + s * (g.nn + 1), g.sym_dst[s], (g.nn + 1) * 2);
          }
          return nb::make_tuple(a, b);
        },
        "size"_a, "(src [8, N*N], dst [8, N*N+1]) point maps of the 8 symmetries");
  m.def("replay", &replay_bytes, "data"_a, "collect_features"_a = true,
        "check_targets"_a = true,
        "Replay a serialized GameRecord: a dict with reason '' and the replay's results, or "
        "the reason code (kgrpc.records.errors.REASON_CODES) and the move index.");
  m.def("sgf_moves_text", &sgf_moves_text, "first"_a, "first_chars"_a, "size"_a, "moves"_a,
        "values"_a.none(), "visits"_a.none(), "full"_a.none(),
        "The SGF text from the root node ``first`` on: every move node, lines wrapped at 78 "
        "characters, the closing parenthesis (kgrpc.sgf); None when a value is not finite.");
  m.def("pairwise_sum_f32", [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig> a) {
    return pairwise_sum(a.data(), static_cast<long>(a.shape(0)));
  });
}

// ------------------------------------------------------------------------------ game set

namespace {

template <class T>
nb::object np_array(const T* src, size_t n) {
  T* data = new T[n ? n : 1];
  if (n) std::memcpy(data, src, n * sizeof(T));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  size_t shape[1] = {n};
  return nb::cast(nb::ndarray<nb::numpy, T>(data, 1, shape, owner));
}

nb::dict finished_dict(const Game& g) {
  const size_t m = g.moves.size();
  std::vector<int32_t> moves(m), visits(m), played(m), offsets(m + 1);
  std::vector<uint8_t> full(m);
  std::vector<double> rv(m), rs(m);
  for (size_t i = 0; i < m; i++) {
    moves[i] = g.moves[i];
    visits[i] = g.targets[i].visits;
    played[i] = g.targets[i].played_visits;
    full[i] = g.targets[i].full;
    rv[i] = g.targets[i].root_value;
    rs[i] = g.targets[i].root_score;
    offsets[i] = g.targets[i].policy0;
  }
  offsets[m] = static_cast<int32_t>(g.policy_moves.size());
  nb::dict d;
  d["id"] = g.id;
  d["moves"] = np_array(moves.data(), m);
  d["full_search"] = np_array(reinterpret_cast<const bool*>(full.data()), m);
  d["visits"] = np_array(visits.data(), m);
  d["played_visits"] = np_array(played.data(), m);
  d["root_value"] = np_array(rv.data(), m);
  d["root_score"] = np_array(rs.data(), m);
  d["policy_offsets"] = np_array(offsets.data(), m + 1);
  d["policy_moves"] = np_array(g.policy_moves.data(), g.policy_moves.size());
  d["policy_probs"] = np_array(g.policy_probs.data(), g.policy_probs.size());
  d["komi"] = g.board.komi;
  d["score"] = g.score;
  d["winner"] = g.winner;
  d["resigned"] = g.resigned;
  d["ownership"] = np_array(g.ownership.data(), g.ownership.size());
  d["would_resign"] = !g.resigned && g.would_resign_color != 0;
  d["false_resignation"] =
      !g.resigned && g.would_resign_color != 0 && g.winner == g.would_resign_color;
  return d;
}

SelfPlayCfg cfg_from(nb::dict d) {
  SelfPlayCfg c;
  SearchCfg& s = c.search;
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "visits") s.visits = nb::cast<int>(v);
    else if (key == "c_puct") s.c_puct = nb::cast<double>(v);
    else if (key == "fpu_reduction") s.fpu_reduction = nb::cast<double>(v);
    else if (key == "root_fpu_reduction") s.root_fpu_reduction = nb::cast<double>(v);
    else if (key == "leaves_per_batch") s.leaves_per_batch = nb::cast<int>(v);
    else if (key == "virtual_loss") s.virtual_loss = nb::cast<double>(v);
    else if (key == "random_symmetry") s.random_symmetry = nb::cast<bool>(v);
    else if (key == "tree_reuse") s.tree_reuse = nb::cast<bool>(v);
    else if (key == "sensible_root_moves") s.sensible_root_moves = nb::cast<bool>(v);
    else if (key == "full_search_prob") c.full_search_prob = nb::cast<double>(v);
    else if (key == "cheap_visits") c.cheap_visits = nb::cast<int>(v);
    else if (key == "temperature_moves") c.temperature_moves = nb::cast<int>(v);
    else if (key == "temperature") c.temperature = nb::cast<double>(v);
    else if (key == "dirichlet_alpha_19") c.dirichlet_alpha_19 = nb::cast<double>(v);
    else if (key == "noise_fraction") c.noise_fraction = nb::cast<double>(v);
    else if (key == "resign_threshold") c.resign_threshold = nb::cast<double>(v);
    else if (key == "resign_consecutive") c.resign_consecutive = nb::cast<int>(v);
    else if (key == "resign_playout_fraction") c.resign_playout_fraction = nb::cast<double>(v);
    else if (key == "max_moves") c.max_moves = nb::cast<int>(v);
    else if (key == "score_utility_factor") s.score_utility_factor = nb::cast<double>(v);
    else if (key == "score_utility_scale") s.score_utility_scale = nb::cast<double>(v);
    else if (key == "forced_playouts_k") c.forced_playouts_k = nb::cast<double>(v);
    else if (key == "prune_policy_target") c.prune_policy_target = nb::cast<bool>(v);
    else if (key == "two_models") c.two_models = nb::cast<bool>(v);
    else if (key == "opening_policy_prob") c.opening_policy_prob = nb::cast<double>(v);
    else if (key == "opening_moves") c.opening_moves = nb::cast<double>(v);
    else if (key == "opening_temperature") c.opening_temperature = nb::cast<double>(v);
    else if (key == "gumbel") s.gumbel = nb::cast<bool>(v);
    else if (key == "gumbel_considered") s.gumbel_cfg.considered = nb::cast<int>(v);
    else if (key == "gumbel_c_visit") s.gumbel_cfg.c_visit = nb::cast<double>(v);
    else if (key == "gumbel_c_scale") s.gumbel_cfg.c_scale = nb::cast<double>(v);
    else if (key == "gumbel_scale") s.gumbel_cfg.noise_scale = nb::cast<double>(v);
    else throw nb::value_error(("unknown game set setting " + key).c_str());
  }
  return c;
}

}  // namespace

void bind_search(nb::module_& m) {
  nb::class_<EvalCache>(m, "EvalCache",
                        "Net outputs by position and symmetry, bounded (oldest out first). "
                        "With random symmetries, a game set using the cache draws each "
                        "position's symmetry from the position and the salt (random when "
                        "omitted), so repeated positions hit.")
      .def(
          "__init__",
          [](EvalCache* self, size_t capacity, nb::handle salt) {
            uint64_t s;
            if (salt.is_none()) {
              std::random_device rd;
              s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
            } else {
              s = nb::cast<uint64_t>(salt);
            }
            new (self) EvalCache(capacity, s);
          },
          "capacity"_a, "salt"_a.none() = nb::none())
      .def_prop_ro("salt", &EvalCache::salt)
      .def_prop_ro("hits", [](const EvalCache& c) { return c.hits; })
      .def_prop_ro("misses", [](const EvalCache& c) { return c.misses; })
      .def_prop_ro("capacity", &EvalCache::capacity)
      .def("__len__", &EvalCache::size)
      .def("clear", &EvalCache::clear);

  nb::class_<GameSet>(m, "GameSet", "Self-play games and their search trees, driven in batches.")
      .def("__init__",
           [](GameSet* self, int size, nb::handle rules, double komi, nb::dict config,
              EvalCache* cache) {
             new (self) GameSet(size, rules_from(rules), komi, cfg_from(config), cache);
           },
           "size"_a, "rules"_a, "komi"_a, "config"_a, "cache"_a.none() = nb::none(),
           nb::keep_alive<1, 6>())
      .def("add_game",
           [](GameSet& gs, uint64_t seed, nb::handle sym_seed, nb::handle white_sym_seed,
              nb::handle komi) {
             const bool has = !sym_seed.is_none(), has_white = !white_sym_seed.is_none();
             const bool has_komi = !komi.is_none();
             return gs.add_game(seed, has, has ? nb::cast<uint64_t>(sym_seed) : 0, has_white,
                                has_white ? nb::cast<uint64_t>(white_sym_seed) : 0, has_komi,
                                has_komi ? nb::cast<double>(komi) : 0.0);
           },
           "seed"_a, "sym_seed"_a = nb::none(), "white_sym_seed"_a = nb::none(),
           "komi"_a = nb::none())
      .def("collect",
           [](GameSet& gs, nb::ndarray<bool, nb::c_contig, nb::device::cpu> planes,
              nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu> globals,
              std::optional<nb::ndarray<int8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>
                  sides) {
             const size_t nn = static_cast<size_t>(gs.size()) * gs.size();
             size_t per_row = 1;
             for (size_t i = 1; i < planes.ndim(); i++) per_row *= planes.shape(i);
             if (planes.ndim() < 2 || per_row != NUM_PLANES * nn)
               throw nb::value_error(("planes must be bool [rows, " + std::to_string(NUM_PLANES) +
                                      ", N, N] (C order)")
                                         .c_str());
             if (globals.shape(1) != static_cast<size_t>(NUM_GLOBALS) ||
                 globals.shape(0) < planes.shape(0))
               throw nb::value_error(
                   ("globals must be float32 [rows, " + std::to_string(NUM_GLOBALS) + "]").c_str());
             const int rows = static_cast<int>(planes.shape(0));
             if (sides && sides->shape(0) < planes.shape(0))
               throw nb::value_error("sides must be int8 [rows]");
             uint8_t* p = reinterpret_cast<uint8_t*>(planes.data());
             float* g = globals.data();
             int8_t* sd = sides ? sides->data() : nullptr;
             nb::gil_scoped_release release;
             return gs.collect(p, g, rows, sd);
           },
           "planes"_a, "globals"_a, "sides"_a = nb::none())
      .def("apply",
           [](GameSet& gs, nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> policy,
              nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> value,
              nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> score) {
             const size_t nn = static_cast<size_t>(gs.size()) * gs.size();
             const size_t rows = value.shape(0);
             if (policy.shape(0) != rows || score.shape(0) != rows || policy.shape(1) != nn + 1)
               throw nb::value_error("apply() needs policy [rows, N*N+1], value and score [rows]");
             {
               nb::gil_scoped_release release;
               gs.apply(policy.data(), value.data(), score.data(), static_cast<int>(rows));
             }
             nb::list out;
             for (const Game& g : gs.take_finished()) out.append(finished_dict(g));
             return out;
           },
           "policy"_a, "value"_a, "score"_a)
      .def_prop_ro("active", &GameSet::active)
      .def_prop_ro("pending_rows", &GameSet::pending_rows)
      .def_prop_ro("tree_bytes", &GameSet::tree_bytes)
      .def_prop_ro("stats", [](const GameSet& gs) {
        nb::dict d;
        d["visits"] = gs.stats.visits;
        d["nn_evals"] = gs.stats.nn_evals;
        d["cache_hits"] = gs.stats.cache_hits;
        d["searches"] = gs.stats.searches;
        d["moves"] = gs.stats.moves;
        d["games"] = gs.stats.games;
        d["root_visits"] = gs.stats.root_visits;
        d["reused_visits"] = gs.stats.reused_visits;
        return d;
      });
}

}  // namespace kgn

NB_MODULE(kgrpc_native, m) {
  m.doc() = "kgrpc's native core: board, features, playouts, record replay and MCTS.";
  m.attr("__version__") = KGRPC_NATIVE_VERSION;
  m.attr("FEATURE_VERSION") = kgn::FEATURE_VERSION;
  m.attr("NUM_PLANES") = kgn::NUM_PLANES;
  m.attr("NUM_GLOBALS") = kgn::NUM_GLOBALS;
#ifdef KGN_DEBUG
  m.attr("DEBUG_CHECKS") = true;  // built with KGRPC_NATIVE_DEBUG: invariant checks on
#else
  m.attr("DEBUG_CHECKS") = false;
#endif
  // Bumped whenever the Python-facing API changes: kgrpc/native.py refuses another value
  // (a stale installed extension), and kgrpc then runs its pure-Python implementation.
  // 4: GameSet.add_game(komi=), "komi" of a finished game; 5: with the search recipe's
  // settings and two-model (match) game sets; 6: sgf_moves_text; 7: EvalCache(capacity,
  // salt), a cached position's symmetry drawn from the position and the salt; 8: replay's
  // per-move move_values, move_visits and move_full (the SGF's values); 9: the Gumbel root
  // search's GameSet settings (gumbel, gumbel_considered, gumbel_c_visit, ...).
  m.attr("API_VERSION") = 9;
  kgn::bind_board(m);
  kgn::bind_functions(m);
  kgn::bind_search(m);
}
