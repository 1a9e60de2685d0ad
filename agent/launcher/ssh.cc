#include "agent/launcher/ssh.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace troika::agent {

std::vector<std::string> SshCommandFromEnvironment(const char* value) {
  std::vector<std::string> words;
  if (value != nullptr) words = absl::StrSplit(value, ' ', absl::SkipWhitespace());
  if (words.empty()) words = {"ssh"};
  return words;
}

std::vector<std::string> SshArgv(const SshOptions& options, const std::string& host,
                                 const std::string& remote_command) {
  std::vector<std::string> argv = options.command;
  const int64_t seconds = std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(options.connect_timeout, absl::Seconds(1))));
  for (std::string option :
       {std::string("BatchMode=yes"), std::string("StrictHostKeyChecking=accept-new"),
        absl::StrCat("ConnectTimeout=", seconds)}) {
    argv.push_back("-o");
    argv.push_back(std::move(option));
  }
  if (options.port > 0) {
    argv.push_back("-p");
    argv.push_back(absl::StrCat(options.port));
  }
  if (!options.identity_file.empty()) {
    argv.push_back("-i");
    argv.push_back(options.identity_file);
  }
  argv.push_back(host);
  argv.push_back(remote_command);
  return argv;
}

std::string ShellQuote(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyz"
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_=./,:@%+") == std::string::npos;
  return plain ? arg : absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
}

std::string ShellJoin(const std::vector<std::string>& args) {
  std::string joined;
  for (const std::string& arg : args) {
    if (!joined.empty()) joined += ' ';
    joined += ShellQuote(arg);
  }
  return joined;
}

}  // namespace troika::agent
