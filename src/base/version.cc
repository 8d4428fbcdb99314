// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "trainprof/version.h"

namespace trainprof {

std::string_view version() {
  return TRAINPROF_VERSION_STRING;  // the project's version, from the build
}

}  // namespace trainprof
