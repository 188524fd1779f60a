// The Python module kgrpc_native (nanobind): its constants, and the bindings of each area
// (bindings.h: board, features, replay, search). kgrpc/native.py loads it; kgrpc/go/*,
// kgrpc/records/replay.py and kgrpc/mcts/gameset.py dispatch to it.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "dcheck.h"
#include "features.h"

using namespace nb::literals;

NB_MODULE(kgrpc_native, m) {
  m.doc() = "kgrpc's native core: board, features, playouts, record replay and MCTS.";
  m.attr("__version__") = KGRPC_NATIVE_VERSION;
  m.attr("FEATURE_VERSION") = kgn::FEATURE_VERSION;
  m.attr("NUM_PLANES") = kgn::NUM_PLANES;
  m.attr("NUM_GLOBALS") = kgn::NUM_GLOBALS;
#ifdef KGN_DEBUG
  m.attr("DEBUG_CHECKS") = true;  // built with KGRPC_NATIVE_DEBUG: invariant checks on
  // A check that fails when asked to, only in this build: tests/test_native_debug.py calls it
  // in a child process (a failed check aborts) to see that KGN_DCHECK is live, not compiled
  // out by NDEBUG or a wrong flag order while DEBUG_CHECKS still says true.
  m.def("_fail_dcheck", [](bool fail) { KGN_DCHECK(!fail); }, "fail"_a);
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
  kgn::bind_features(m);
  kgn::bind_replay(m);
  kgn::bind_search(m);
}
