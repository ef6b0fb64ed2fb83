// `hgsim live` and `hgsim validate live`: the hgsim process becomes the Python interpreter
// (exec), with every argument unchanged, PYTHONPATH and HGSIM_BINARY set, and the
// interpreter's exit status and signals as its own. HGSIM_PYTHON names a stand-in script.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/live_command.hpp"

namespace {

namespace fs = std::filesystem;

// Runs the built hgsim with `args` and HGSIM_PYTHON=`python`; the wait status.
int run_hgsim(const std::vector<std::string>& args, const std::string& python) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("HGSIM_PYTHON", python.c_str(), 1);
    ::setenv("PYTHONPATH", "/earlier", 1);
    std::vector<std::string> words{HGSIM_BINARY};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

std::string read(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class LiveCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hgsim_test_live_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // Writes each argument on its own line, then the environment the runner needs.
    script_ = dir_ / "python";
    std::ofstream(script_) << "#!/bin/sh\n"
                           << "out=" << (dir_ / "seen").string() << "\n"
                           << ": > \"$out\"\n"
                           << "for a in \"$@\"; do printf '%s\\n' \"$a\" >> \"$out\"; done\n"
                           << "echo \"PYTHONPATH=$PYTHONPATH\" >> \"$out\"\n"
                           << "echo \"HGSIM_BINARY=$HGSIM_BINARY\" >> \"$out\"\n"
                           << "[ \"$3\" = signal ] && kill -TERM $$\n"
                           << "exit 7\n";
    fs::permissions(script_, fs::perms::owner_all);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, script_;
};

}  // namespace

TEST_F(LiveCommand, PassesEveryArgumentAndTheEnvironmentThrough) {
  const int status =
      run_hgsim({"live", "--plan", "a plan.json", "--help", "-x", ""}, script_.string());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);  // the runner's own exit status
  const std::string expected =
      std::string("-m\nhgsim_runtime.live\n--plan\na plan.json\n--help\n") +
      "-x\n\nPYTHONPATH=" + HGSIM_PYTHON_PACKAGE_DIR_FOR_TESTS + ":" + HGSIM_SOURCE_DIR +
      "/runtime:/earlier\nHGSIM_BINARY=" + fs::canonical(HGSIM_BINARY).string() + "\n";
  EXPECT_EQ(read(dir_ / "seen"), expected);
}

TEST_F(LiveCommand, ValidateLiveRunsTheValidationModule) {
  const int status = run_hgsim({"validate", "live", "run1"}, script_.string());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  const std::string seen = read(dir_ / "seen");
  EXPECT_EQ(seen.rfind("-m\nhgsim_runtime.validate\nrun1\nPYTHONPATH=", 0), 0u) << seen;
}

TEST_F(LiveCommand, SignalsAreTheRunnersOwn) {
  const int status = run_hgsim({"live", "signal"}, script_.string());
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST_F(LiveCommand, AMissingInterpreterIsAClearErrorWithStatusOne) {
  const int status = run_hgsim({"live", "x"}, (dir_ / "no-such-python").string());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

TEST(LiveCommandLine, OnlyLiveCommandsGoToPython) {
  const char* live[] = {"hgsim", "live", "a", "--b"};
  const auto c = hgsim::apps::python_command(4, live);
  EXPECT_EQ(c.module, "hgsim_runtime.live");
  EXPECT_EQ(c.args, (std::vector<std::string>{"a", "--b"}));
  const char* validate[] = {"hgsim", "validate", "live"};
  EXPECT_EQ(hgsim::apps::python_command(3, validate).module, "hgsim_runtime.validate");
  const char* run[] = {"hgsim", "run", "live"};
  EXPECT_EQ(hgsim::apps::python_command(3, run).module, "");
  const char* validate_other[] = {"hgsim", "validate", "check"};
  EXPECT_EQ(hgsim::apps::python_command(3, validate_other).module, "");
}
