// troikactl: the operator CLI of a Troika coordinator. Lists jobs, shows one job (ranks,
// pending tensors and the ranks they wait for, stragglers), cancels a job, and starts and
// stops a job's timeline. Every command needs the admin token; show also works with the
// job's own token.
//
// Exit codes: 0 ok, 1 the RPC failed (its message is printed), 2 usage error.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/flags_usage.h"
#include "coordinator/admin/admin_client.h"
#include "coordinator/admin/admin_format.h"

namespace {

std::string EnvOr(const char* name, const char* otherwise = "") {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? env : otherwise;
}

constexpr char kUsage[] =
    "Inspect and control the jobs of a Troika coordinator.\n"
    "Usage:\n"
    "  troikactl [--coordinator=HOST:PORT] list\n"
    "  troikactl [--coordinator=HOST:PORT] show JOB\n"
    "  troikactl [--coordinator=HOST:PORT] cancel JOB [--reason=TEXT]\n"
    "  troikactl [--coordinator=HOST:PORT] timeline start JOB FILE [--max_bytes=N]\n"
    "  troikactl [--coordinator=HOST:PORT] timeline stop JOB\n"
    "Timelines are Chrome traces written by the coordinator into its --timeline_dir.\n"
    "--coordinator defaults to $TROIKA_COORDINATOR, else 127.0.0.1:7070. Transport security:\n"
    "--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM] (or $TROIKA_TLS_CA, $TROIKA_TLS_CERT,\n"
    "$TROIKA_TLS_KEY), or --plaintext (or TROIKA_PLAINTEXT=1) for a plaintext coordinator.\n"
    "Every command needs the coordinator's admin token: --admin_token_file=FILE,\n"
    "$TROIKA_ADMIN_TOKEN_FILE or $TROIKA_ADMIN_TOKEN. Without it, show JOB also works with\n"
    "that job's own token: --job_token_file=FILE, $TROIKA_JOB_TOKEN or $TROIKA_JOB_TOKEN_FILE.";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "troikactl: %s\n%s\n", message.c_str(), kUsage);
  return 2;
}

// Abseil exits 1 on an unknown flag; troikactl reports usage errors with 2, so it checks
// first.
std::string FirstUnknownFlag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    absl::string_view name = arg.substr(0, arg.find('='));
    if (absl::FindCommandLineFlag(name) != nullptr) continue;
    // Abseil's own: --help and friends, --version, --flagfile, --fromenv, --undefok...
    if (absl::StartsWith(name, "help") || name == "version" || name == "only_check_args" ||
        name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
      continue;
    }
    if (absl::ConsumePrefix(&name, "no") && absl::FindCommandLineFlag(name) != nullptr) continue;
    return std::string(argv[i]);
  }
  return "";
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "troikactl: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

ABSL_FLAG(std::string, coordinator, EnvOr("TROIKA_COORDINATOR", "127.0.0.1:7070"),
          "host:port of the coordinator (default: $TROIKA_COORDINATOR, else 127.0.0.1:7070)");
ABSL_FLAG(std::string, reason, "", "for cancel: why, sent to every rank with the abort");
ABSL_FLAG(int64_t, max_bytes, 0,
          "for timeline start: size cap of the file in bytes (0: the coordinator's default, "
          "1 GiB)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "give up on the coordinator after this");
ABSL_FLAG(std::string, tls_ca, EnvOr("TROIKA_TLS_CA"),
          "TLS: PEM CA of the coordinator's certificate (default: $TROIKA_TLS_CA)");
ABSL_FLAG(std::string, tls_cert, EnvOr("TROIKA_TLS_CERT"),
          "mutual TLS: PEM client certificate (default: $TROIKA_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, EnvOr("TROIKA_TLS_KEY"),
          "mutual TLS: PEM key of --tls_cert (default: $TROIKA_TLS_KEY)");
ABSL_FLAG(std::string, admin_token_file, EnvOr("TROIKA_ADMIN_TOKEN_FILE"),
          "file holding the coordinator's admin token (default: $TROIKA_ADMIN_TOKEN_FILE; "
          "$TROIKA_ADMIN_TOKEN gives the token itself)");
ABSL_FLAG(std::string, job_token_file, "",
          "for show: file holding the job's own token, which the coordinator accepts instead "
          "of the admin token to describe that job (default: $TROIKA_JOB_TOKEN, else the file "
          "$TROIKA_JOB_TOKEN_FILE)");
ABSL_FLAG(bool, plaintext, EnvOr("TROIKA_PLAINTEXT") == "1" || EnvOr("TROIKA_PLAINTEXT") == "true",
          "no TLS (the coordinator runs --plaintext); a host:port coordinator needs --tls_ca or "
          "this (default: $TROIKA_PLAINTEXT)");

int main(int argc, char** argv) {
  troika::ShowFlagsOf("coordinator/admin/troikactl_main.cc");
  absl::SetProgramUsageMessage(kUsage);
  troika::HandleHelp(argc, argv);
  if (std::string unknown = FirstUnknownFlag(argc, argv); !unknown.empty()) {
    return UsageError(absl::StrCat("unknown flag ", unknown));
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) return UsageError("no command given");
  const std::string command = args[1];
  const size_t operands = args.size() - 2;

  std::string admin_token = EnvOr("TROIKA_ADMIN_TOKEN");
  if (const std::string path = absl::GetFlag(FLAGS_admin_token_file); !path.empty()) {
    auto token = troika::ReadTokenFile(path);
    if (!token.ok()) return Fail(token.status());
    admin_token = *std::move(token);
  }
  // The job's token, for show: the flag, else $TROIKA_JOB_TOKEN, else $TROIKA_JOB_TOKEN_FILE
  // (the order agents and ranks read them in).
  std::string job_token;
  std::string job_token_file = absl::GetFlag(FLAGS_job_token_file);
  if (job_token_file.empty()) {
    job_token = EnvOr("TROIKA_JOB_TOKEN");
    if (job_token.empty()) job_token_file = EnvOr("TROIKA_JOB_TOKEN_FILE");
  }
  if (!job_token_file.empty()) {
    auto token = troika::ReadTokenFile(job_token_file);
    if (!token.ok()) return Fail(token.status());
    job_token = *std::move(token);
  }
  troika::coordinator::AdminClient client(
      absl::GetFlag(FLAGS_coordinator),
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
       absl::GetFlag(FLAGS_plaintext)},
      std::move(admin_token), absl::GetFlag(FLAGS_timeout), std::move(job_token));
  if (command == "list") {
    if (operands != 0) return UsageError("list takes no arguments");
    auto jobs = client.ListJobs();
    if (!jobs.ok()) return Fail(jobs.status());
    std::fputs(troika::coordinator::FormatJobList(*jobs).c_str(), stdout);
    return 0;
  }
  if (command == "show") {
    if (operands != 1) return UsageError("show takes one job name");
    auto info = client.DescribeJob(args[2]);
    if (!info.ok()) return Fail(info.status());
    std::fputs(troika::coordinator::FormatJobInfo(*info).c_str(), stdout);
    return 0;
  }
  if (command == "cancel") {
    if (operands != 1) return UsageError("cancel takes one job name");
    absl::Status status = client.CancelJob(args[2], absl::GetFlag(FLAGS_reason));
    if (!status.ok()) return Fail(status);
    std::printf("job '%s' cancelled\n", args[2]);
    return 0;
  }
  if (command == "timeline") {
    const std::string action = operands >= 1 ? args[2] : "";
    if (action == "start" && operands == 3) {
      auto path = client.StartTimeline(args[3], args[4], absl::GetFlag(FLAGS_max_bytes));
      if (!path.ok()) return Fail(path.status());
      std::printf("job '%s': writing a timeline to %s on the coordinator\n", args[3],
                  path->c_str());
      return 0;
    }
    if (action == "stop" && operands == 2) {
      auto info = client.StopTimeline(args[3]);
      if (!info.ok()) return Fail(info.status());
      std::printf("job '%s': timeline %s written, %lld bytes%s\n", args[3], info->path.c_str(),
                  static_cast<long long>(info->bytes_written),
                  info->truncated ? " (truncated at its size cap)" : "");
      return 0;
    }
    return UsageError("timeline takes: start JOB FILE, or stop JOB");
  }
  return UsageError(absl::StrCat("unknown command '", command, "'"));
}
