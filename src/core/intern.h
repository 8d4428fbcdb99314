// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// String interning for runtime names.
//
// Events carry `const char*` names that live for the whole process: string
// literals, or pointers returned by intern(). The flusher maps each pointer to
// an id of the raw file's string table the first time it sees it.
#ifndef TRAINPROF_CORE_INTERN_H_
#define TRAINPROF_CORE_INTERN_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainprof/range.h"  // detail::intern, the interning itself

namespace trainprof::core {

// Marker domains get small dense ids so that an event can carry one in 16 bits.
// Id 0 is "default". Returns kDomainOverflow past 65534 distinct domains.
inline constexpr uint16_t kDomainOverflow = 0xffff;
uint16_t domain_id(std::string_view domain);
const char* domain_name(uint16_t id);  // nullptr for an unknown id

// How many distinct names were interned in this process (tests: what
// grows with a long run).
size_t interned_count();

// fork(): every table's lock is held across the call, so that a child finds
// none locked by a thread it does not have.
void intern_lock_for_fork();
void intern_unlock_after_fork();

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_INTERN_H_
