// Options::FromEnvironment: the one place the client library reads TROIKA_* variables.

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "common/types.h"
#include "troika/troika.h"

namespace troika {
namespace {

const char* Get(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

absl::Status ReadInt(const char* name, int* out) {
  const char* value = Get(name);
  if (value == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  if (!absl::SimpleAtoi(value, out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", value, "' is not an integer"));
  }
  return absl::OkStatus();
}

absl::Status ReadSeconds(const char* name, absl::Duration* out) {
  const char* value = Get(name);
  if (value == nullptr) return absl::OkStatus();
  double seconds;
  if (!absl::SimpleAtod(value, &seconds) || seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", value, "' is not a positive number of seconds"));
  }
  *out = absl::Seconds(seconds);
  return absl::OkStatus();
}

// TROIKA_<name>, else HOROVOD_<name>: 1/true or 0/false; unset leaves `out` alone.
absl::Status ReadSwitch(const std::string& name, std::optional<bool>* out) {
  for (const std::string& var : {"TROIKA_" + name, "HOROVOD_" + name}) {
    const char* value = Get(var.c_str());
    if (value == nullptr) continue;
    bool on;
    if (!absl::SimpleAtob(value, &on)) {
      return absl::InvalidArgumentError(absl::StrCat(var, "='", value, "' is not 1 or 0"));
    }
    *out = on;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::string HostName() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0 || buffer[0] == '\0') return "localhost";
  return buffer;
}

}  // namespace

absl::Status Options::SecurityFromEnvironment(Options& o) {
  absl::StatusOr<ClientSecurity> env = troika::SecurityFromEnvironment();
  if (!env.ok()) return env.status();
  o.tls_ca = env->tls.ca_file;
  o.tls_cert = env->tls.cert_file;
  o.tls_key = env->tls.key_file;
  o.plaintext = env->tls.plaintext;
  o.job_token = env->job_token;
  return absl::OkStatus();
}

absl::StatusOr<Options> Options::FromEnvironment() {
  Options o;
  const char* coordinator = Get("TROIKA_COORDINATOR");
  const char* job = Get("TROIKA_JOB");
  if (coordinator == nullptr || job == nullptr) {
    return absl::InvalidArgumentError(
        "TROIKA_COORDINATOR and TROIKA_JOB must be set (troikarun and troika-agent set them)");
  }
  o.coordinator = coordinator;
  o.job = job;
  if (absl::Status s = ReadInt("TROIKA_RANK", &o.rank); !s.ok()) return s;
  if (absl::Status s = ReadInt("TROIKA_SIZE", &o.size); !s.ok()) return s;
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("TROIKA_RANK=", o.rank, " is not in [0, TROIKA_SIZE=", o.size, ")"));
  }
  if (const char* v = Get("TROIKA_EPOCH");
      v != nullptr && (!absl::SimpleAtoi(v, &o.epoch) || o.epoch < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TROIKA_EPOCH='", v, "' is not a non-negative integer"));
  }
  o.host = Get("TROIKA_HOST") ? Get("TROIKA_HOST") : HostName();
  if (const char* v = Get("TROIKA_DATA_HOST")) o.data_host = v;
  if (const char* v = Get("TROIKA_TRANSPORT")) o.transport = v;
  for (auto [name, out] : {std::pair{"HIERARCHICAL_ALLREDUCE", &o.hierarchical_allreduce},
                           std::pair{"HIERARCHICAL_ALLGATHER", &o.hierarchical_allgather}}) {
    if (absl::Status s = ReadSwitch(name, out); !s.ok()) return s;
  }
  if (absl::Status s = ReadSeconds("TROIKA_CONNECT_TIMEOUT", &o.connect_timeout); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadSeconds("TROIKA_ATTACH_TIMEOUT", &o.attach_timeout); !s.ok()) return s;
  // Horovod's bound on a Gloo operation is Troika's on any data-plane transfer (as troikarun's
  // --gloo-timeout-seconds sets it), where TROIKA_DATA_TIMEOUT does not say.
  const char* data_timeout = Get("TROIKA_DATA_TIMEOUT") != nullptr ? "TROIKA_DATA_TIMEOUT"
                                                                   : "HOROVOD_GLOO_TIMEOUT_SECONDS";
  if (absl::Status s = ReadSeconds(data_timeout, &o.data_timeout); !s.ok()) return s;
  if (absl::Status s = SecurityFromEnvironment(o); !s.ok()) return s;
  if (const char* v = Get("TROIKA_NCCL_LIBRARY")) o.nccl_library = v;
  if (const char* v = Get("TROIKA_COMPRESSION")) {
    bool known = false;
    for (Compression c : {Compression::kNone, Compression::kFloat16, Compression::kBFloat16}) {
      if (std::string(v) == CompressionName(c)) {
        o.compression = c;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("TROIKA_COMPRESSION='", v, "' is not one of none, float16, bfloat16"));
    }
  }
  return o;
}

}  // namespace troika
