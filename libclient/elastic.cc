#include "troika/elastic.h"

#include <string>

#include "common/logging.h"
#include "common/messages.h"
#include "common/wire.h"
#include "troika/v1/troika.pb.h"

namespace troika {

std::optional<MembershipChange> GetMembershipChange(const absl::Status& status) {
  return MembershipChangeOf(status);
}

namespace elastic {

absl::Status Commit(Context& context, State& state) {
  state.Commit();
  return context.ElasticCommit().Wait();
}

absl::Status Run(Options options, State& state,
                 const std::function<absl::Status(Context& context)>& train) {
  for (;;) {
    absl::StatusOr<std::unique_ptr<Context>> context = Context::Init(options);
    if (!context.ok()) return context.status();
    absl::Status status = state.Sync(**context);
    if (status.ok()) status = train(**context);
    std::optional<MembershipChange> change = GetMembershipChange(status);
    const int rank = (*context)->rank();
    const int next = change ? change->NextRank(rank) : -1;
    if (next < 0 && change.has_value() && change->at_commit) {
      // This rank's node left the job at the commit it just made (drained): its work is in
      // the committed state the others go on from.
      TROIKA_LOG(WARNING) << "rank " << rank << " leaves the job at a commit: its node was "
                          << "drained; the job goes on with " << change->size << " ranks";
      (*context)->Shutdown().IgnoreError();  // the generation ended: nothing to finish
      return absl::OkStatus();
    }
    if (next < 0) {
      absl::Status shutdown = (*context)->Shutdown();
      return status.ok() ? shutdown : status;
    }
    (*context)->Shutdown().IgnoreError();  // the generation ended: nothing to finish
    context->reset();
    TROIKA_LOG(WARNING) << "rank " << rank << " goes on as rank " << next << " of " << change->size
                        << " (generation " << change->epoch << ")"
                        << (change->at_commit ? ", from the commit that admitted new ranks" : "");
    options.rank = next;
    options.size = change->size;
    options.epoch = change->epoch;
    if (!change->at_commit) state.Restore();
  }
}

}  // namespace elastic
}  // namespace troika
