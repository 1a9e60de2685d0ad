#include "agent/launch/line_forwarder.h"

#include <errno.h>
#include <unistd.h>

#include <utility>

namespace troika::agent {

void FdSink::Write(std::string_view text) {
  while (!text.empty()) {
    ssize_t n = write(fd_, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

LineForwarder::LineForwarder(std::string prefix, OutputSink& sink, size_t max_line_bytes)
    : prefix_(std::move(prefix)), sink_(sink), max_line_bytes_(max_line_bytes) {}

void LineForwarder::Feed(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    // A line ends at '\n' ("\r\n" too) or at a '\r' alone: a progress bar redrawing its
    // line, written at once (as horovodrun does), with the prefix before what follows.
    const size_t end = data.find_first_of("\r\n");
    const size_t room = max_line_bytes_ - partial_.size();
    if (end != std::string_view::npos && end <= room) {
      const size_t terminator =
          data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n' ? 2 : 1;
      out += prefix_;
      out += partial_;
      out += data.substr(0, end + terminator);
      partial_.clear();
      data.remove_prefix(end + terminator);
    } else if (data.size() >= room) {
      out += prefix_;
      out += partial_;
      out += data.substr(0, room);
      out += '\n';
      partial_.clear();
      data.remove_prefix(room);
    } else {
      partial_.append(data);
      data = {};
    }
  }
  if (!out.empty()) sink_.Write(out);
}

void LineForwarder::Finish() {
  if (partial_.empty()) return;
  sink_.Write(prefix_ + partial_ + "\n");
  partial_.clear();
}

}  // namespace troika::agent
