// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Outputs are replaced whole or not at all.
#include "exporter/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/run_directory.h"
#include "base/safe_file.h"
#include "test_util.h"

namespace trainprof::exporter {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// An output directory open as the analysis opens PROFILER_OUTPUT.
struct OpenDir {
  explicit OpenDir(const std::string& dir) : path(dir), fd(base::open_directory_at(AT_FDCWD, dir)) {}
  OutputPath file(const std::string& name) const { return {fd.get(), path, name}; }
  std::string path;
  base::UniqueFd fd;
};

// Entries of `dir` other than `keep`.
std::vector<std::string> others(const std::string& dir, const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != keep) names.push_back(e.path().filename().string());
  }
  return names;
}

TEST(OutputFile, CommitReplacesAnEarlierOutputAndLeavesNoTemporaryFile) {
  test::TempDir dir;
  std::string path = dir.sub("trace_view.json");
  write_file(path, "the previous analysis, longer than the new one");
  OpenDir out_dir(dir.path());
  OutputFile out(out_dir.file("trace_view.json"));
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
  OpenDir out_dir(dir.path());
  OutputFile out(out_dir.file("op_statistic.csv"));
  std::string buffer = "Type,Count\n";
  ASSERT_TRUE(out.commit(buffer)) << out.error();
  EXPECT_EQ(test::read_text(path), "Type,Count\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(OutputFile, AnOutputNeverCommittedLeavesThePreviousOneIntact) {
  test::TempDir dir;
  std::string path = dir.sub("trace_view.json");
  write_file(path, "previous");
  OpenDir out_dir(dir.path());
  {
    OutputFile out(out_dir.file("trace_view.json"));
    std::string buffer(3 << 20, 'x');  // drained: on disk under the temporary name
    out.drain(buffer);
    EXPECT_EQ(others(dir.path(), "trace_view.json").size(), 1u);
  }  // an analysis that failed before commit
  EXPECT_EQ(test::read_text(path), "previous");
  EXPECT_TRUE(others(dir.path(), "trace_view.json").empty());
}

TEST(OutputFile, ADirectoryInTheWayIsAnErrorAndStaysWhereItIs) {
  test::TempDir dir;
  std::string path = dir.sub("trace_view.json");
  fs::create_directory(path);
  write_file(path + "/notes.txt", "the user's");
  OpenDir out_dir(dir.path());
  OutputFile out(out_dir.file("trace_view.json"));
  std::string buffer = "new output";
  EXPECT_FALSE(out.commit(buffer));
  EXPECT_NE(out.error().find("cannot rename into place"), std::string::npos) << out.error();
  EXPECT_EQ(test::read_text(path + "/notes.txt"), "the user's");
}

TEST(OutputFile, AnUncreatableFileIsAnErrorThatNamesThePath) {
  test::TempDir dir;
  std::string not_a_directory = dir.sub("PROFILER_OUTPUT");
  write_file(not_a_directory, "a file where the output directory should be");  // fails even for root
  OpenDir out_dir(not_a_directory);
  EXPECT_FALSE(out_dir.fd.valid());
  OutputFile out(out_dir.file("trace_view.json"));
  std::string buffer = "x";
  out.drain(buffer, 0);
  EXPECT_FALSE(out.commit(buffer));
  EXPECT_NE(out.error().find("cannot create a temporary file for '" + not_a_directory + "/trace_view.json'"),
            std::string::npos)
      << out.error();
  EXPECT_EQ(test::read_text(not_a_directory), "a file where the output directory should be");
}

// Issue 11 item 8: the temporary name of an output was path + ".tmp", opened
// O_TRUNC through whatever was there: a symlink planted at it had its target
// overwritten.
TEST(OutputFile, ASymlinkPlantedAtATemporaryNameIsNeverWrittenThrough) {
  test::TempDir dir;
  std::string victim = dir.sub("victim");
  write_file(victim, "precious");
  fs::create_directory(dir.sub("out"));
  fs::create_symlink(victim, dir.sub("out/trace_view.json.tmp"));
  OpenDir out_dir(dir.sub("out"));
  OutputFile out(out_dir.file("trace_view.json"));
  std::string buffer = "new output";
  ASSERT_TRUE(out.commit(buffer)) << out.error();
  EXPECT_EQ(test::read_text(victim), "precious");
  EXPECT_EQ(test::read_text(dir.sub("out/trace_view.json")), "new output");
  EXPECT_TRUE(fs::is_symlink(dir.sub("out/trace_view.json.tmp")));  // left alone
}

TEST(OutputFile, TemporaryNamesAreFreshAndNeverReused) {
  test::TempDir dir;
  OpenDir out_dir(dir.path());
  OutputFile a(out_dir.file("trace_view.json"));
  OutputFile b(out_dir.file("trace_view.json"));  // two writers of one output at once
  std::vector<std::string> temporaries = others(dir.path(), "");
  ASSERT_EQ(temporaries.size(), 2u);
  EXPECT_NE(temporaries[0], temporaries[1]);
  for (const std::string& name : temporaries) {
    EXPECT_TRUE(base::is_temporary_name(name)) << name;
    struct stat st {};
    ASSERT_EQ(lstat(dir.sub(name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
  }
  std::string one = "one", two = "two";
  ASSERT_TRUE(a.commit(one)) << a.error();
  ASSERT_TRUE(b.commit(two)) << b.error();
  EXPECT_EQ(test::read_text(dir.sub("trace_view.json")), "two");
  EXPECT_TRUE(others(dir.path(), "trace_view.json").empty());
}

// An existing file at a temporary name is not opened (O_EXCL|O_NOFOLLOW):
// the writer takes another name.
TEST(OutputFile, WriteFileAtomicallyAtReplacesASymlinkInsteadOfFollowingIt) {
  test::TempDir dir;
  std::string victim = dir.sub("victim");
  write_file(victim, "precious");
  fs::create_directory(dir.sub("out"));
  fs::create_symlink(victim, dir.sub("out/profiler_info.json"));
  fs::create_symlink(victim, dir.sub("out/profiler_info.json.tmp"));
  OpenDir out_dir(dir.sub("out"));
  EXPECT_EQ(base::write_file_atomically_at(out_dir.fd.get(), "profiler_info.json", "{}\n", "info"), "");
  EXPECT_EQ(test::read_text(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(dir.sub("out/profiler_info.json")));
  EXPECT_EQ(test::read_text(dir.sub("out/profiler_info.json")), "{}\n");
}

TEST(OutputFile, RemoveTemporariesTakesOnlyTemporaryNames) {
  test::TempDir dir;
  OpenDir out_dir(dir.path());
  write_file(dir.sub("trace_view.json"), "output");
  write_file(dir.sub("trace_view.json.tmp"), "someone's file");
  std::string tmp;
  base::UniqueFd fd(base::create_temporary_at(out_dir.fd.get(), "trace_view.json", &tmp));
  ASSERT_TRUE(fd.valid());
  base::remove_temporaries_at(out_dir.fd.get());
  EXPECT_FALSE(fs::exists(dir.sub(tmp)));
  EXPECT_TRUE(fs::exists(dir.sub("trace_view.json")));
  EXPECT_TRUE(fs::exists(dir.sub("trace_view.json.tmp")));
}

}  // namespace
}  // namespace trainprof::exporter
