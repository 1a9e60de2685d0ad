#pragma once
// troikarun --output-filename DIR: one stream (stdout or stderr) of every rank written to a file
// of its own, as horovodrun writes them: DIR/rank.N/stdout and DIR/rank.N/stderr, N padded
// with zeros to the width of the job's highest rank (rank.0 .. rank.9 for 10 ranks, rank.00
// .. rank.10 for 11).
//
// RankFileSink receives what the agents write: whole lines, each "[RANK] text" (ended by
// '\n', or by a '\r' alone: a progress bar's piece, as LineForwarder writes it). It writes
// each line's text (without the prefix) to its rank's file and passes every line, prefix and
// all, on to the next sink (the terminal). A line without a rank prefix (troikarun's and the
// agents' own messages) goes to the next sink alone.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "agent/launch/line_forwarder.h"

namespace troika::agent {

// Thread-safe. Owns its files; `next` must outlive it.
class RankFileSink : public OutputSink {
 public:
  // Makes DIR and DIR/rank.N (as mkdir -p) and creates (truncates) DIR/rank.N/`stream` for
  // every rank of a job of `size` ranks, as horovodrun does at the start; a rank above them
  // (an elastic job grown) gets its file at its first line. `stream`: "stdout" or "stderr".
  // Fails naming the path that cannot be made.
  static absl::StatusOr<std::unique_ptr<RankFileSink>> Create(const std::string& dir,
                                                              const std::string& stream, int size,
                                                              OutputSink& next);
  ~RankFileSink() override;
  RankFileSink(const RankFileSink&) = delete;
  RankFileSink& operator=(const RankFileSink&) = delete;

  // `text`: whole lines (an unfinished last line is written as it is). A file that cannot be
  // created is reported once on `next` ("troikarun: --output-filename: ...") and its rank's
  // lines go to `next` alone; write errors drop the text, as FdSink does.
  void Write(std::string_view text) override;

  // DIR/rank.N/`stream` for `rank`, zero-padded for a job of `size` ranks.
  static std::string PathOf(const std::string& dir, const std::string& stream, int rank, int size);

 private:
  RankFileSink(std::string dir, std::string stream, int size, OutputSink& next);
  // The descriptor of `rank`'s file, opening (creating) it the first time; -1 if it cannot be.
  int FileOf(int rank);  // called with mu_ held

  // Constant after construction.
  const std::string dir_;
  const std::string stream_;
  const int size_;
  OutputSink& next_;

  std::mutex mu_;
  std::map<int, int> fds_;  // guarded by mu_: rank -> descriptor; -1: given up
};

}  // namespace troika::agent
