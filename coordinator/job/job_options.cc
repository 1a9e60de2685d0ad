#include "coordinator/job/job_options.h"

namespace troika::coordinator {

const char* AbortCauseName(AbortCause cause) {
  switch (cause) {
    case AbortCause::kRankExit:
      return "rank_exit";
    case AbortCause::kConnectionLost:
      return "connection_lost";
    case AbortCause::kDeadlock:
      return "deadlock";
    case AbortCause::kStall:
      return "stall";
    case AbortCause::kCancelled:
      return "cancelled";
    case AbortCause::kShutdown:
      return "shutdown";
    case AbortCause::kProtocolError:
      return "protocol_error";
    case AbortCause::kAttachTimeout:
      return "attach_timeout";
  }
  return "unknown";
}

}  // namespace troika::coordinator
