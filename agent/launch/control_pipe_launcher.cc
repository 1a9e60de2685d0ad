#include "agent/launch/control_pipe_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace troika::agent {
namespace {

constexpr int kPipeBytes = 1 << 20;

// A started process and the write end of its stdin.
class ControlledProcess : public Process {
 public:
  ControlledProcess(std::unique_ptr<Process> inner, int control_fd)
      : inner_(std::move(inner)), control_fd_(control_fd) {}
  ~ControlledProcess() override { CloseControl(); }

  int pid() const override { return inner_->pid(); }
  int stdout_fd() const override { return inner_->stdout_fd(); }
  int stderr_fd() const override { return inner_->stderr_fd(); }
  int exit_fd() const override { return inner_->exit_fd(); }
  std::optional<ExitStatus> TryReap() override {
    std::optional<ExitStatus> exit = inner_->TryReap();
    if (exit.has_value()) CloseControl();
    return exit;
  }
  ExitStatus Wait() override {
    ExitStatus exit = inner_->Wait();
    CloseControl();
    return exit;
  }
  void Signal(int signal) override {
    if (signal == SIGINT || signal == SIGTERM) {
      CloseControl();
    } else {
      inner_->Signal(signal);
    }
  }

 private:
  void CloseControl() {
    if (control_fd_ >= 0) close(control_fd_);
    control_fd_ = -1;
  }

  std::unique_ptr<Process> inner_;
  int control_fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> ControlPipeLauncher::Launch(const ProcessSpec& spec) {
  if (!spec.control_input.has_value()) return inner_.Launch(spec);
  const std::string& input = *spec.control_input;
  const std::string program = spec.argv.empty() ? "" : spec.argv[0];
  if (input.size() > static_cast<size_t>(kPipeBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot start '", program, "': its ",
                                                   input.size(), " bytes of control input exceed ",
                                                   kPipeBytes, " bytes"));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start '", program, "': pipe: ", strerrordesc_np(errno)));
  }
  // The whole input fits in the pipe, so writing it never waits for the child.
  if (input.size() > 65536 && fcntl(fds[1], F_SETPIPE_SZ, kPipeBytes) < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("cannot start '", program,
                                            "': cannot grow its stdin pipe to ", kPipeBytes,
                                            " bytes: ", strerrordesc_np(error)));
  }
  ProcessSpec inner_spec{spec.argv, spec.env, fds[0], std::nullopt};
  absl::StatusOr<std::unique_ptr<Process>> process = inner_.Launch(inner_spec);
  close(fds[0]);
  if (!process.ok()) {
    close(fds[1]);
    return process.status();
  }
  size_t written = 0;
  while (written < input.size()) {
    const ssize_t n = write(fds[1], input.data() + written, input.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child is gone already (EPIPE): its exit says why
    written += static_cast<size_t>(n);
  }
  return std::make_unique<ControlledProcess>(*std::move(process), fds[1]);
}

}  // namespace troika::agent
