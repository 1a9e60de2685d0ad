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
  auto emit = [&](std::string_view line) {
    out += prefix_;
    out += partial_;
    out += line;
    out += '\n';
    partial_.clear();
  };
  while (!data.empty()) {
    size_t newline = data.find('\n');
    size_t room = max_line_bytes_ - partial_.size();
    if (newline != std::string_view::npos && newline <= room) {
      emit(data.substr(0, newline));
      data.remove_prefix(newline + 1);
    } else if (data.size() >= room) {
      emit(data.substr(0, room));
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
