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

namespace {

// The length of the longest start of `text` that does not end inside a UTF-8 character:
// text.size() unless its last bytes begin a character they do not finish. Text that is not
// UTF-8 there, or a start that would be empty, is not shortened.
size_t WholeCharacters(std::string_view text) {
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t length = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
    return length > back && back < text.size() ? text.size() - back : text.size();
  }
  return text.size();
}

}  // namespace

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
      // A full line: written up to its last whole character; the rest starts the next.
      partial_.append(data.substr(0, room));
      data.remove_prefix(room);
      const size_t cut = WholeCharacters(partial_);
      out += prefix_;
      out.append(partial_, 0, cut);
      out += '\n';
      partial_.erase(0, cut);
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
