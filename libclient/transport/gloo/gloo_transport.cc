#include "libclient/transport/gloo/gloo_transport.h"

#include <signal.h>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"
#include "libclient/transport/gloo/gloo_communicator.h"
#include "libclient/transport/gloo/gloo_store.h"

namespace troika::transport {
namespace {

// Gloo writes to its sockets without MSG_NOSIGNAL, so a write to a peer that has gone away
// raises SIGPIPE, whose default action kills the process. Ignore it unless the program has
// chosen a disposition of its own (gRPC and Python ignore it too).
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectOrThrow(const CommunicatorSpec& spec,
                                                             Store& store) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = spec.host;
  std::shared_ptr<::gloo::transport::Device> device = ::gloo::transport::tcp::CreateDevice(attr);

  const auto timeout = absl::ToChronoMilliseconds(spec.timeout);
  auto context = std::make_shared<::gloo::rendezvous::Context>(spec.rank, spec.size);
  context->setTimeout(timeout);
  GlooStore adapter(store, spec.timeout);
  GlooMeshStore mesh(adapter, spec.rank, spec.size);  // no pair connects before all publish
  // PrefixStore adds its own "/" separator.
  std::string prefix = spec.store_prefix;
  if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  ::gloo::rendezvous::PrefixStore prefixed(prefix, mesh);
  context->connectFullMesh(prefixed, device);
  // Every member is connected before any returns: connectFullMesh can return on one while
  // another still completes its side of their connection, and a member that closed its
  // communicator at once (a rank that shuts down right after init, then inits again, as
  // Horovod's tests do) would break that connection under it.
  if (spec.size > 1) {
    const std::string connected = absl::StrCat(spec.store_prefix, "connected/");
    std::vector<std::string> keys;
    for (int r = 0; r < spec.size; ++r) keys.push_back(absl::StrCat(connected, r));
    absl::Status s = store.Set(keys[spec.rank], "1");
    if (s.ok()) s = store.Wait(keys, spec.timeout);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("waiting for every rank to connect: ", s.message()));
    }
  }
  return std::make_unique<GlooCommunicator>(std::move(context), timeout);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> GlooTransport::Connect(const CommunicatorSpec& spec,
                                                                     Store& store) {
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo transport: invalid rank ", spec.rank, " for group size ", spec.size));
  }
  if (spec.timeout <= absl::ZeroDuration() || spec.timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo transport: timeout must be in (0, 24h], got ", absl::FormatDuration(spec.timeout)));
  }
  const std::string where =
      absl::StrCat("gloo connect failed (rank ", spec.rank, " of ", spec.size, ", host '",
                   spec.host, "', store prefix '", spec.store_prefix, "'): ");
  IgnoreSigpipeUnlessHandled();
  try {
    return ConnectOrThrow(spec, store);
  } catch (const GlooStoreError& e) {
    return absl::Status(e.status().code(), absl::StrCat(where, e.status().message()));
  } catch (const ::gloo::IoException& e) {
    return absl::UnavailableError(absl::StrCat(where, e.what()));
  } catch (const std::exception& e) {  // gloo::Exception, EnforceNotMet, system_error...
    return absl::UnavailableError(absl::StrCat(where, e.what()));
  }
}

}  // namespace troika::transport
