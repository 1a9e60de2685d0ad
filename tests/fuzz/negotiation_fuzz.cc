// libFuzzer target: the coordinator's input handling — session messages decoded from the wire
// (v1::Up as a rank or an agent sends them, compacted requests included), checked and fed to
// a job's negotiation (JobNegotiation: set 0 and process sets, response cache on, schedules)
// in a bounded, adversarial order — and the client's decoding of what comes back (v1::Down). Any
// crash, sanitizer report, or a response that does not survive the wire, is a finding.
//
// Built with clang by scripts/fuzz.sh (not by the main build); run there for a bounded time.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/wire.h"
#include "coordinator/negotiation/job_negotiation.h"
#include "troika/v1/troika.pb.h"

namespace troika::coordinator {
namespace {

// What the client decodes must encode back to the same message.
void CheckRoundTrip(const std::vector<Response>& responses) {
  DownMessage down;
  down.responses = responses;
  v1::Down wire;
  ToWire(down, &wire);
  std::string bytes;
  if (!wire.SerializeToString(&bytes)) std::abort();
  v1::Down parsed;
  if (!parsed.ParseFromString(bytes)) std::abort();
  DownMessage back = FromWire(parsed);
  if (back.responses.size() != responses.size()) std::abort();
}

void Run(FuzzedDataProvider& in) {
  const int size = in.ConsumeIntegralInRange<int>(1, 8);
  NegotiatorOptions options;
  options.cache_capacity = in.ConsumeIntegralInRange<int>(0, 8);
  options.fusion_threshold_bytes = in.ConsumeIntegralInRange<int64_t>(0, 1 << 20);
  options.cycle_time = absl::Microseconds(in.ConsumeIntegralInRange<int>(0, 2000));
  options.max_pending_tensors = 32;
  JobNegotiation negotiation("fuzz", size, options, {.enabled = true},
                             [](std::shared_ptr<const DownMessage>) {});
  std::set<int> departed;
  absl::Time now = absl::UnixEpoch();
  while (in.remaining_bytes() > 0) {
    now += absl::Microseconds(in.ConsumeIntegralInRange<int>(0, 5000));
    const int action = in.ConsumeIntegralInRange<int>(0, 9);
    if (action == 0) {
      const int rank = in.ConsumeIntegralInRange<int>(0, size - 1);
      if (departed.insert(rank).second) negotiation.RemoveRank(rank, "fuzz");
      continue;
    }
    if (action == 1) {  // what a client receives: any bytes
      v1::Down down;
      if (down.ParseFromString(in.ConsumeRandomLengthString(512))) FromWire(down);
      continue;
    }
    v1::Up up;
    if (!up.ParseFromString(in.ConsumeRandomLengthString(1024)) || !up.has_requests()) continue;
    std::vector<TensorRequest> requests;
    for (const v1::Request& wire : up.requests().requests()) {
      if (!AppendFromWire(wire, &requests).ok()) continue;
    }
    // The job checks that the session owns each rank; a session here owns every rank.
    auto owned = [size](int rank) {
      return rank >= 0 && rank < size ? absl::OkStatus() : absl::PermissionDeniedError("rank");
    };
    DownMessage misses;
    negotiation.Submit(std::move(requests), now, owned, misses).IgnoreError();
    negotiation.ReportReady(now);
    absl::Time next;
    std::vector<Response> responses = negotiation.Poll(now, departed, &next);
    negotiation.Sending(responses, now);
    negotiation.TakeEndedCacheIds();
    negotiation.MaybePublishSchedule([] { return true; });
    negotiation.Pending();
    CheckRoundTrip(responses);
  }
}

}  // namespace
}  // namespace troika::coordinator

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  troika::coordinator::Run(in);
  return 0;
}
