#pragma once
// Forwarding a rank's output line by line, each line prefixed with the rank ("[2] loss 0.1").
//
// OutputSink is where forwarded text goes; every Write() call is written whole (one write(2)
// when the descriptor allows), so lines from different ranks never interleave within a line.
// LineForwarder splits one stream into lines and writes each completed line with its prefix.
// A line ends at '\n' (with a '\r' before it, if any) or at a '\r' alone, as horovodrun's
// lines do: a progress bar that redraws its line with '\r' is shown as it goes, each piece
// prefixed.

#include <cstddef>
#include <string>
#include <string_view>

namespace troika::agent {

// Thread-safe implementations required: troikarun's own messages and the ranks' output may
// be written from different threads.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  virtual void Write(std::string_view text) = 0;
};

// Writes to a file descriptor it does not own (1 or 2). Retries short writes and EINTR;
// a broken pipe or other error drops the text silently (the ranks must not die because
// troikarun's reader went away). Thread-safe.
class FdSink : public OutputSink {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  void Write(std::string_view text) override;

 private:
  const int fd_;
};

// Not thread-safe: one stream, fed by one thread.
class LineForwarder {
 public:
  // A line longer than `max_line_bytes` (without its newline) is written in pieces of at most
  // that size, each as a line of its own, so a rank that never writes a newline cannot make
  // the forwarder buffer without bound; a piece never ends inside a UTF-8 character.
  LineForwarder(std::string prefix, OutputSink& sink, size_t max_line_bytes = 64 * 1024);
  LineForwarder(const LineForwarder&) = delete;
  LineForwarder& operator=(const LineForwarder&) = delete;

  // Writes every line (or '\r'-ended piece) completed by `data` in one Write(); keeps an
  // unfinished line.
  void Feed(std::string_view data);
  // Writes the unfinished last line, if any, with a newline added. Later Feed()s start a
  // new line.
  void Finish();

 private:
  const std::string prefix_;
  OutputSink& sink_;
  const size_t max_line_bytes_;
  std::string partial_;  // the current unfinished line, without prefix
};

}  // namespace troika::agent
