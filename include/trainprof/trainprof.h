// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Umbrella header: the whole public API.
#ifndef TRAINPROF_TRAINPROF_H_
#define TRAINPROF_TRAINPROF_H_

#include "trainprof/advise.h"
#include "trainprof/analyse.h"
#include "trainprof/call_events.h"
#include "trainprof/dataset.h"
#include "trainprof/diff.h"
#include "trainprof/dynamic.h"
#include "trainprof/env.h"
#include "trainprof/flight_recorder.h"
#include "trainprof/frontend.h"
#include "trainprof/key_averages.h"
#include "trainprof/mcp.h"
#include "trainprof/memory.h"
#include "trainprof/options.h"
#include "trainprof/profiler.h"
#include "trainprof/range.h"
#include "trainprof/schedule.h"
#include "trainprof/shard_meeting.h"
#include "trainprof/stack_sample.h"
#include "trainprof/version.h"
#include "trainprof/what_if.h"

#endif  // TRAINPROF_TRAINPROF_H_
