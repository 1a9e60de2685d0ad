// libFuzzer target: the coordinator's input handling — session messages decoded from the wire
// (v1::Up as a rank or an agent sends them, compacted requests included), checked and fed to
// a job's negotiators (set 0 and process sets, response cache on) in a bounded, adversarial
// order — and the client's decoding of what comes back (v1::Down). Any crash, sanitizer
// report, or a response that does not survive the wire, is a finding.
//
// Built with clang by scripts/fuzz.sh (not by the main build); run there for a bounded time.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/wire.h"
#include "coordinator/negotiation/negotiator.h"
#include "coordinator/negotiation/process_sets.h"
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
  Negotiator negotiator(size, options);
  ProcessSets sets(size, options);
  absl::Time now = absl::UnixEpoch();
  while (in.remaining_bytes() > 0) {
    now += absl::Microseconds(in.ConsumeIntegralInRange<int>(0, 5000));
    const int action = in.ConsumeIntegralInRange<int>(0, 9);
    if (action == 0) {
      negotiator.RemoveRank(in.ConsumeIntegralInRange<int>(-1, size), "fuzz");
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
    for (TensorRequest& r : requests) {
      if (r.rank < 0 || r.rank >= size) continue;  // the job drops these (session ownership)
      if (r.process_set != 0) {
        std::optional<Response> rejected;
        sets.Submit(std::move(r), now, &rejected).IgnoreError();
        continue;
      }
      if (r.cache_id != 0) {  // as Job::Submit does
        negotiator.SubmitCached(r.rank, r.cache_id, now).IgnoreError();
        continue;
      }
      if (ProcessSets::IsControl(r)) sets.Record(r);  // as Job::Submit does
      negotiator.Submit(std::move(r), now).IgnoreError();
    }
    absl::Time next;
    std::vector<Response> responses = negotiator.Poll(now, &next);
    std::vector<ReadyRecord> records;
    std::vector<int64_t> bytes;
    std::vector<Response> set_responses = sets.Poll(now, &next, &records, &bytes);
    responses.insert(responses.end(), set_responses.begin(), set_responses.end());
    negotiator.TakeReadyRecords();
    negotiator.TakeAllreduceResponseBytes();
    negotiator.TakeEndedCacheIds();
    negotiator.Pending();
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
