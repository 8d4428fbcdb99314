// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The one merge of two key_averages() rows (include/trainprof/key_averages.h):
// calls, times, FLOPs and memory summed; the earliest call's start and
// parent kept. Its own header so that a test can give every field a known
// answer.
#ifndef TRAINPROF_PIPELINE_KEY_AVERAGE_MERGE_H_
#define TRAINPROF_PIPELINE_KEY_AVERAGE_MERGE_H_

#include "trainprof/key_averages.h"

namespace trainprof::pipeline {

// Adds `row` into `into` (an empty `into`, count 0, takes `row`'s first call).
void merge_key_average(KeyAverage& into, const KeyAverage& row);

}  // namespace trainprof::pipeline

#endif  // TRAINPROF_PIPELINE_KEY_AVERAGE_MERGE_H_
