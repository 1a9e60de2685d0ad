#pragma once
// NodeEnd: why this node's part of the job is ending, first cause kept — the coordinator
// aborted the job, the coordinator was lost for good, the node's attach was refused, or the
// agent is closing (its ranks are gone) — and what each means for what the node still does
// (restarts, attaching again, reconnecting) and for its exit. Plain state: not thread-safe
// (the Agent's lock guards it).

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/messages.h"

namespace troika::agent {

class NodeEnd {
 public:
  // The coordinator aborted the job (the first abort is kept).
  void Aborted(std::shared_ptr<const DownMessage> abort) {
    if (abort_ == nullptr) abort_ = std::move(abort);
  }
  // The coordinator is gone for good: `why`. False (and nothing kept) if the node was already
  // ending otherwise (aborted, lost, closing).
  bool Lost(std::string why);
  // The node's attach was refused: `why` (the latest refusal is kept).
  void AttachRefused(std::string why) { attach_error_ = std::move(why); }
  // The agent closes: its ranks are gone.
  void Close() { closing_ = true; }

  const DownMessage* abort() const { return abort_.get(); }
  const std::string& lost() const { return lost_; }
  const std::string& attach_error() const { return attach_error_; }
  // Aborted or closing: nothing is retried any more (registrations, attaches, reconnecting).
  bool aborted_or_closing() const { return abort_ != nullptr || closing_; }
  // Aborted, lost or closing: nothing new starts (restarts, a next generation or incarnation).
  bool stopping() const { return abort_ != nullptr || closing_ || !lost_.empty(); }
  // What ranks asking to attach again are answered while it ends: OK if it does not.
  absl::Status Refusal() const;

 private:
  std::shared_ptr<const DownMessage> abort_;
  std::string lost_;
  std::string attach_error_;
  bool closing_ = false;
};

}  // namespace troika::agent
