// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The whole analysis of a run directory whose raw file is the input: reading,
// the model (name ids, slice keys), every pass and exporter (the SQLite
// database too), then the summary that reads the outputs back.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "trainprof/analyse.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("TRAINPROF_LOG_LEVEL", "error", 1);  // every input is damaged: quiet
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string run = [] {
    std::string dir = trainprof::fuzz::scratch_dir() + "/host_1_trainprof";
    std::filesystem::create_directories(dir + "/raw");
    return dir;
  }();
  trainprof::fuzz::write_file(run + "/raw/host.tpraw", data, size);
  trainprof::AnalyseOptions options;
  options.max_workers = 1;
  options.export_db = true;
  trainprof::AnalyseReport report = trainprof::analyse(run, options);
  if (report.ok()) (void)trainprof::summarize_run(run);
  return 0;
}
