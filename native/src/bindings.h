// What the binding files share (bindings_board.cpp, bindings_features.cpp,
// bindings_replay.cpp, bindings_search.cpp, module.cpp): new numpy arrays, Python values
// read as C++ ones, the rules and the board as Python objects, and each area's bind_* call.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "board.h"

namespace nb = nanobind;

namespace kgn {

// A new zero-filled numpy array of the shape, owned by Python; *data_out is its buffer.
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

// operator.index(h): a Python int (or anything with __index__) as a C++ long.
long as_index(nb::handle h);
std::vector<int> index_list(nb::handle iterable);
nb::object py_attr(const char* module, const char* name);
// Raises kgrpc.go.board.IllegalMoveError with the message.
[[noreturn]] void raise_illegal(const std::string& msg);
// A kgrpc.go.rules.Rules as RulesC (TypeError for anything else), and back.
RulesC rules_from(nb::handle rules);
nb::object rules_object(const RulesC& r);

// The Python Board: the C++ board and the Rules object it was made with (returned as is).
struct PyBoard {
  Board b;
  nb::object rules;
};

nb::ndarray<nb::numpy, int8_t> int8_vector(const int8_t* src, size_t n);

void bind_board(nb::module_& m);     // bindings_board.cpp: Board and its captures
void bind_features(nb::module_& m);  // bindings_features.cpp: features, playouts, symmetries
void bind_replay(nb::module_& m);    // bindings_replay.cpp: record replay, SGF move text
void bind_search(nb::module_& m);    // bindings_search.cpp: EvalCache, GameSet

}  // namespace kgn
