// KGN_DCHECK(cond): an invariant of the native core (the board's group bookkeeping, the
// search's trees), checked in debug builds (the CMake option KGRPC_NATIVE_DEBUG,
// `make test-native-debug`) and compiled out of release builds, where the hot loops must not
// pay for it (as minigo's MG_DCHECK and KataGo's asserts).
#pragma once
#include <cassert>

#ifdef KGN_DEBUG
#define KGN_DCHECK(cond) assert(cond)
#else
#define KGN_DCHECK(cond) ((void)0)
#endif
