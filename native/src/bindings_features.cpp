// Bindings of the functions on a board: input features, random playouts (drawing from a
// Python random.Random, in place or through its state tuple), the symmetry maps, and numpy's
// pairwise sum.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstring>

#include "bindings.h"
#include "features.h"
#include "pymt.h"

using namespace nb::literals;

namespace kgn {

namespace {

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

}  // namespace

void bind_features(nb::module_& m) {
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
  m.def("pairwise_sum_f32", [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig> a) {
    return pairwise_sum(a.data(), static_cast<long>(a.shape(0)));
  });
}

}  // namespace kgn
