// Bindings of the board: kgrpc_native.Board (kgrpc.go.board.Board's API, errors and
// messages) with its live captures mapping, and what every binding file uses to read Python
// values and rules.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bindings.h"
#include "board.h"

using namespace nb::literals;

namespace kgn {

// ------------------------------------------------------------------------------ helpers

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

// The Python classes here are looked up once and held for the process's life (allocated,
// never destroyed: a static nb::object's destructor could run after the interpreter is gone).
RulesC rules_from(nb::handle rules) {
  static nb::object* cls = nullptr;
  // The presets are singletons and Rules is frozen: the last one's conversion can be reused.
  static nb::object* last = nullptr;
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

nb::ndarray<nb::numpy, int8_t> int8_vector(const int8_t* src, size_t n) {
  int8_t* d;
  auto a = new_array<int8_t>({n}, &d);
  std::memcpy(d, src, n);
  return a;
}

// ------------------------------------------------------------------------------ Board

namespace {

const char* reason_text(Illegal r) {
  switch (r) {
    case OCCUPIED: return "occupied";
    case KO: return "ko";
    case SUICIDE: return "suicide";
    case SUPERKO: return "superko";
    default: return "";
  }
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

}  // namespace

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

}  // namespace kgn
