// The self-play search: a set of games and their trees, driven in batches (see docs/native.md).
#pragma once

namespace nanobind {
class module_;
}

namespace kgn {
void bind_search(nanobind::module_& m);
}
