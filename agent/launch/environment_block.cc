#include "agent/launch/environment_block.h"

#include <errno.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troika::agent {

std::string EncodeEnvironmentBlock(const std::vector<std::string>& entries) {
  std::string block;
  for (const std::string& entry : entries) {
    block += entry;
    block.push_back('\0');
  }
  block.push_back('\0');
  return block;
}

absl::StatusOr<std::vector<std::string>> ReadEnvironmentBlock(int fd) {
  std::vector<std::string> entries;
  std::string entry;
  while (true) {
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the environment block on stdin ended early (",
                       n < 0 ? strerrordesc_np(errno) : "EOF", ") after ", entries.size(),
                       " entries; troika-agent --launcher_stdin is started by "
                       "troikarun over ssh, not by hand"));
    }
    if (c != '\0') {
      entry.push_back(c);
      continue;
    }
    if (entry.empty()) return entries;
    if (entry.find('=') == std::string::npos || entry.front() == '=') {
      return absl::InvalidArgumentError(absl::StrCat("the environment block on stdin holds '",
                                                     entry.substr(0, 64), "', not NAME=value"));
    }
    entries.push_back(std::move(entry));
    entry.clear();
  }
}

std::vector<std::string> ForwardedEnvironment(const std::vector<std::string>& environment) {
  std::vector<std::string> forwarded;
  for (const std::string& entry : environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (absl::StartsWith(name, "BASH_FUNC_") || absl::StartsWith(name, "SSH_") ||
        absl::EndsWith(name, "CUDA_VISIBLE_DEVICES") || name == "OLDPWD" || name == "PWD" ||
        name == "HOSTNAME" || name == "SHLVL" || name == "_") {
      continue;
    }
    forwarded.push_back(entry);
  }
  return forwarded;
}

}  // namespace troika::agent
