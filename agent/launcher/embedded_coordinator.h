#pragma once
// The options of the coordinator troikarun runs inside itself (without --coordinator): one
// job's coordinator, configured by horovodrun's flags as Horovod's rank 0 is by them.
//
// Pure function; thread-safe.

#include <string>

#include "agent/launcher/troikarun_options.h"
#include "coordinator/coordinator.h"

namespace troika::agent {

// CoordinatorOptions listening on `listen_address` ("127.0.0.1:0" for a job on this machine
// alone; port 0: any free one) in plaintext (only the job's token admits an agent or a rank)
// or, with --tls-cert, over TLS (mutual with --tls-client-ca),
// with troikarun's flags applied to every job's options: --fusion-threshold-mb,
// --cycle-time-ms, --schedules, --cache-capacity, the autotune flags (a fusion threshold or
// cycle time that was given stays fixed while the other is tuned, as with horovodrun) and the
// stall-check flags; everything else is the coordinator's default. --timeline is not here: the
// job writes it (Job::StartTimeline) once troikarun has created it.
coordinator::CoordinatorOptions EmbeddedCoordinatorOptions(const TroikarunOptions& options,
                                                           const std::string& listen_address);

}  // namespace troika::agent
