#pragma once
// Elastic jobs (docs/elastic.md): a job started with a minimum size (`troikarun --min-np`)
// goes on when ranks are lost, as long as at least that many remain. Every surviving rank's
// pending and later operations then fail with ABORTED, "membership of job 'j' changed: rank 2
// on host-a was killed by signal 9 (Killed); the job goes on with 3 ranks as generation 2",
// and the status carries the renumbering (GetMembershipChange). The survivors make a new
// Context with their new rank and size, go back to their last committed state and take rank
// 0's: Run() does all of it. Nodes that register for the running job (up to its maximum,
// `troikarun --max-np`) are admitted at a commit: every rank's elastic::Commit fails alike
// with the change that admits them, and Run goes on from the commit just made. A node can
// also leave at a commit (troikarun's host discovery drained its host): the others go on from
// that commit, and Run returns OK on the leaving node's ranks, which are no longer in the job.
//
//   struct Model : troika::elastic::State { ... Commit, Restore, Sync ... };
//   absl::Status s = troika::elastic::Run(*options, model, [&](troika::Context& ctx) {
//     for (; model.step < steps; ++model.step) {
//       ... ctx.Allreduce(...) ...
//       if (model.step % 10 == 0) {
//         if (absl::Status c = troika::elastic::Commit(ctx, model); !c.ok()) return c;
//       }
//     }
//     return absl::OkStatus();
//   });

#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "troika/troika.h"
#include "troika/types.h"

namespace troika {

// The renumbering an elastic job's membership change carries (the status of every failed
// operation once the job lost ranks and went on); std::nullopt for any other status.
std::optional<MembershipChange> GetMembershipChange(const absl::Status& status);

namespace elastic {

// What a rank keeps in memory across membership changes.
class State {
 public:
  virtual ~State() = default;
  // Keeps the live state as the one to go back to. Called by the training function, every
  // few steps: a membership change loses the steps since the last commit.
  virtual void Commit() = 0;
  // Goes back to the last commit (after a membership change: a collective in flight may
  // have completed on some ranks and not on others).
  virtual void Restore() = 0;
  // Makes every rank's state rank 0's (a broadcast), at the start of every generation.
  virtual absl::Status Sync(Context& context) = 0;
};

// Commits `state` (State::Commit), then marks the commit point of every rank
// (Context::ElasticCommit), where nodes waiting to join are admitted: OK, or the membership
// change that admits them (or one that loses ranks, or any other error) for `train` to return
// as it is.
absl::Status Commit(Context& context, State& state);

// Runs `train` in an elastic job until it returns: Context::Init(options), state.Sync, train;
// when the job's membership changed, the context is shut down, `state` restored to its last
// commit (not when the change admitted new ranks at a commit: the state is that commit) and
// the loop goes on as the next generation (the new rank and size in `options`).
// Returns what `train` returned (after a clean Shutdown), or the first error that is not a
// membership change (Init's included).
absl::Status Run(Options options, State& state,
                 const std::function<absl::Status(Context& context)>& train);

}  // namespace elastic
}  // namespace troika
