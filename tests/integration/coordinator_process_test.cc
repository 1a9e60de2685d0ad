// The troika-coordinator binary as a real process: serves, and stops cleanly on SIGTERM.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "troika/troika.h"

namespace troika {
namespace {

class CoordinatorProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_file_ = absl::StrCat(::testing::TempDir(), "/coordinator-port-", getpid());
    std::remove(port_file_.c_str());
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      std::string port_flag = "--port_file=" + port_file_;
      execl(TROIKA_COORDINATOR_BINARY, TROIKA_COORDINATOR_BINARY, "--listen=127.0.0.1:0",
            "--plaintext", port_flag.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (port_ == 0 && absl::Now() < deadline) {
      std::ifstream in(port_file_);
      if (!(in >> port_)) absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_NE(port_, 0) << "the coordinator did not report its port";
  }

  void TearDown() override {
    if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Waits up to `timeout` for the child; returns its wait status or -1.
  int WaitForExit(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (absl::Now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

  std::string port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_F(CoordinatorProcessTest, ServesAJobAndStopsCleanlyOnSigterm) {
  Options o;
  o.coordinator = absl::StrCat("127.0.0.1:", port_);
  o.plaintext = true;
  o.job = "solo";
  o.rank = 0;
  o.size = 1;
  auto context = Context::Init(o);
  ASSERT_TRUE(context.ok()) << context.status();
  float x = 3;
  ASSERT_TRUE((*context)->Allreduce("x", &x, &x, DataType::kFloat32, {1}).Wait().ok());
  EXPECT_EQ(x, 3);

  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  int status = WaitForExit(absl::Seconds(60));
  ASSERT_NE(status, -1) << "the coordinator did not exit within 60 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;

  // The job was aborted by the shutdown: the rank is told, not left hanging.
  Handle h = (*context)->Allreduce("after", &x, &x, DataType::kFloat32, {1});
  absl::Status s = h.WaitFor(absl::Seconds(60));  // a not-hung bound
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

}  // namespace
}  // namespace troika
