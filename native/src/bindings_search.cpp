// Bindings of the search: kgrpc_native.EvalCache and kgrpc_native.GameSet (its settings
// read from a dict, its arrays checked, the GIL released while it works, finished games
// handed back as dicts of numpy arrays).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bindings.h"
#include "features.h"
#include "search.h"

using namespace nb::literals;

namespace kgn {

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
