#include "search.h"

#include <nanobind/nanobind.h>

namespace kgn {
void bind_search(nanobind::module_&) {}
}
