#pragma once
// MemorySink: an OutputSink that keeps everything written to it, for tests. Thread-safe.

#include <mutex>
#include <string>
#include <string_view>

#include "agent/launch/line_forwarder.h"

namespace troika::agent {

class MemorySink : public OutputSink {
 public:
  void Write(std::string_view text) override {
    std::lock_guard<std::mutex> lock(mu_);
    text_.append(text);
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  mutable std::mutex mu_;
  std::string text_;
};

}  // namespace troika::agent
