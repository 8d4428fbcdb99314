// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "base/close_names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trainprof::base {
namespace {

const std::vector<std::string> kFields = {"start_step", "stop_step", "with_stack", "record_shapes",
                                          "profile_memory"};

TEST(CloseNames, ATypoFindsTheNameItMeant) {
  EXPECT_EQ(close_names("start_stpe", kFields), std::vector<std::string>{"start_step"});
  EXPECT_EQ(close_names("record_shape", kFields), std::vector<std::string>{"record_shapes"});
  EXPECT_EQ(close_names("WITH_STACK", kFields), std::vector<std::string>{});  // the same name, case aside
  EXPECT_EQ(close_names("Profile_Memry", kFields), std::vector<std::string>{"profile_memory"});
}

TEST(CloseNames, APartOfANameFindsIt) {
  EXPECT_EQ(close_names("memory", kFields), std::vector<std::string>{"profile_memory"});
  EXPECT_EQ(close_names("aten::addmm_x", {"aten::addmm", "aten::mm"}),
            std::vector<std::string>{"aten::addmm"});
}

TEST(CloseNames, AFarNameFindsNothingAndTheClosestComeFirst) {
  EXPECT_TRUE(close_names("xyz", kFields).empty());
  EXPECT_TRUE(close_names("", kFields).empty());
  EXPECT_EQ(close_names("start_stp", {"start_steps", "start_step"}),
            (std::vector<std::string>{"start_step", "start_steps"}));
  EXPECT_EQ(close_names("start_stp", {"start_steps", "start_step"}, 1),
            std::vector<std::string>{"start_step"});
  EXPECT_EQ(did_you_mean("stop_stp", {"stop_step"}), " (did you mean stop_step?)");
  EXPECT_EQ(did_you_mean("xyz", kFields), "");
}

}  // namespace
}  // namespace trainprof::base
