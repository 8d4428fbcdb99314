// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The advisor: what to change in a training job, ranked by what it is worth.
//
//   trainprof::AdviceReport a = trainprof::advise("./trainprof_out");
//   if (!a.ok()) std::cerr << a.error << "\n";
//   std::cout << a.text;
//
// Each finding comes from a fixed rule (docs/ADVICE.md: every rule, its
// threshold and why) over what the analysis measured: the evidence (steps,
// names, numbers), the change to make, and what the change would save per
// step, re-timed through the run's dependencies where that can be done
// (analysis's what-if estimates), else bounded by the time the problem takes.
// A run is analysed first when it is not (or was by a version without the
// advisor); a directory of several ranks' runs also gets the cluster's
// findings (the straggler, slow links), running `trainprof cluster` when its
// outputs are missing.
#ifndef TRAINPROF_ADVISE_H_
#define TRAINPROF_ADVISE_H_

#include <string>
#include <vector>

namespace trainprof {

struct Advice {
  std::string rule;          // "data_wait", "straggler", ... (docs/ADVICE.md)
  std::string title;         // the problem in a few words
  std::string evidence;      // what it rests on
  std::string change;        // what to change
  double step_ms = 0;        // the median step it is measured against (0: a cluster finding)
  double saving_ms = -1;     // per step; < 0: not estimated
  std::string saving_basis;  // "re-timed: ..." or "at most: ..."
  std::vector<int> ranks;    // the ranks it was found on (empty: the run's only rank)
  std::string run;           // the run directory it was read from ("": the cluster's)
  // A straggler's cause: "compute", "data loading", "communication", "host
  // work outside operators" or "unknown"; "" for other rules.
  std::string cause;
};

struct AdviceReport {
  std::string error;  // nothing could be advised (no run, not analysable)
  std::vector<std::string> warnings;
  std::vector<Advice> findings;  // the largest saving first; not estimated last
  std::string text;              // what `trainprof advise` prints
  std::string json;              // the findings as a JSON array (`trainprof advise --json`)
  bool ok() const { return error.empty(); }
};

AdviceReport advise(const std::string& path);

}  // namespace trainprof

#endif  // TRAINPROF_ADVISE_H_
