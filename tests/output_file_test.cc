// Copyright trainprof authors. Outputs are replaced whole or not at all.
#include "export/output_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace trainprof::exporter {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(OutputFile, CommitReplacesAnEarlierOutputAndLeavesNoTemporaryFile) {
  test::TempDir dir;
  std::string path = dir.sub("trace_view.json");
  write_file(path, "the previous analysis, longer than the new one");
  OutputFile out(path);
  std::string buffer = "new";
  out.drain(buffer, 0);
  buffer = " output";
  ASSERT_TRUE(out.commit(buffer)) << out.error();
  EXPECT_EQ(test::read_text(path), "new output");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(OutputFile, CommitCreatesAFileThatDidNotExist) {
  test::TempDir dir;
  std::string path = dir.sub("op_statistic.csv");
  OutputFile out(path);
  std::string buffer = "Type,Count\n";
  ASSERT_TRUE(out.commit(buffer)) << out.error();
  EXPECT_EQ(test::read_text(path), "Type,Count\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(OutputFile, AnOutputNeverCommittedLeavesThePreviousOneIntact) {
  test::TempDir dir;
  std::string path = dir.sub("trace_view.json");
  write_file(path, "previous");
  {
    OutputFile out(path);
    std::string buffer(3 << 20, 'x');  // drained: on disk under the temporary name
    out.drain(buffer);
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }  // an analysis that failed before commit
  EXPECT_EQ(test::read_text(path), "previous");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(OutputFile, ADirectoryInTheWayIsAnErrorAndStaysWhereItIs) {
  test::TempDir dir;
  std::string path = dir.sub("trace_view.json");
  fs::create_directory(path);
  write_file(path + "/notes.txt", "the user's");
  OutputFile out(path);
  std::string buffer = "new output";
  EXPECT_FALSE(out.commit(buffer));
  EXPECT_NE(out.error().find("cannot rename into place"), std::string::npos) << out.error();
  EXPECT_EQ(test::read_text(path + "/notes.txt"), "the user's");
}

TEST(OutputFile, AnUncreatableFileIsAnErrorThatNamesThePath) {
  test::TempDir dir;
  std::string not_a_directory = dir.sub("PROFILER_OUTPUT");
  write_file(not_a_directory, "a file where the output directory should be");  // fails even for root
  OutputFile out(not_a_directory + "/trace_view.json");
  std::string buffer = "x";
  out.drain(buffer, 0);
  EXPECT_FALSE(out.commit(buffer));
  EXPECT_NE(out.error().find("cannot create '" + not_a_directory + "/trace_view.json.tmp'"),
            std::string::npos)
      << out.error();
  EXPECT_EQ(test::read_text(not_a_directory), "a file where the output directory should be");
}

}  // namespace
}  // namespace trainprof::exporter
