#include "agent/launcher/host_flags.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/cli/command_line.h"

namespace troika::agent {
namespace {

constexpr char kProgram[] = "troikarun";

bool IsHostName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

// Slots as written after "host:" or "slots="; an error message (without context) if invalid.
std::optional<std::string> ParseSlots(absl::string_view text, int* slots) {
  if (!absl::SimpleAtoi(text, slots)) return absl::StrCat("slots '", text, "' is not a number");
  if (*slots < 1 || *slots > kMaxRanks) {
    return absl::StrCat("slots must be between 1 and ", kMaxRanks, ", got ", *slots);
  }
  return std::nullopt;
}

// "host" or "host:slots"; an error message (without context) if invalid.
std::optional<std::string> ParseHost(absl::string_view text, HostSlots* host) {
  absl::string_view name = text;
  std::optional<absl::string_view> slots;
  if (size_t colon = text.find(':'); colon != absl::string_view::npos) {
    name = text.substr(0, colon);
    slots = text.substr(colon + 1);
  }
  if (!IsHostName(name)) {
    return absl::StrCat("'", text,
                        "' is not HOST or HOST:SLOTS (a host name is letters, digits, '_', '.' "
                        "and '-'; e.g. worker-0:2,worker-1:2)");
  }
  host->host = std::string(name);
  host->slots = 1;
  if (slots.has_value()) return ParseSlots(*slots, &host->slots);
  return std::nullopt;
}

// One hostfile line without its comment, not blank; an error message if invalid.
std::optional<std::string> ParseHostfileLine(absl::string_view line, HostSlots* host) {
  // "slots = 4" as well as "slots=4", as Open MPI reads them.
  std::string joined;
  for (absl::string_view piece : absl::StrSplit(line, '=')) {
    if (!joined.empty()) joined += '=';
    absl::StrAppend(&joined, absl::StripAsciiWhitespace(piece));
  }
  std::vector<absl::string_view> words =
      absl::StrSplit(joined, absl::ByAnyChar(" \t"), absl::SkipWhitespace());
  if (std::optional<std::string> error = ParseHost(words[0], host)) return error;
  bool slots_given = words[0].find(':') != absl::string_view::npos;
  for (size_t i = 1; i < words.size(); ++i) {
    absl::string_view word = words[i];
    if (absl::ConsumePrefix(&word, "slots=")) {
      if (slots_given) return absl::StrCat("the slots of '", host->host, "' are given twice");
      slots_given = true;
      if (std::optional<std::string> error = ParseSlots(word, &host->slots)) return error;
    } else if (absl::ConsumePrefix(&word, "max_slots=") ||
               absl::ConsumePrefix(&word, "max-slots=")) {
      int max_slots = 0;
      if (!absl::SimpleAtoi(word, &max_slots) || max_slots < 1) {
        return absl::StrCat("'", words[i], "' is not max_slots=N with N a number above 0");
      }
    } else {
      return absl::StrCat("'", words[i], "' is not slots=N (a line is HOST [slots=N])");
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::vector<HostSlots>> ParseHostList(const std::string& text) {
  std::vector<HostSlots> hosts;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    HostSlots host;
    if (std::optional<std::string> error = ParseHost(absl::StripAsciiWhitespace(entry), &host)) {
      return UsageError(kProgram, absl::StrCat("-H: ", *error));
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

absl::StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text,
                                                     const std::string& file) {
  std::vector<HostSlots> hosts;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    HostSlots host;
    if (std::optional<std::string> error = ParseHostfileLine(line, &host)) {
      return UsageError(kProgram, absl::StrCat("--hostfile ", file, ":", number, ": ", *error));
    }
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) {
    return UsageError(kProgram, absl::StrCat("--hostfile ", file, " names no host"));
  }
  return hosts;
}

absl::StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFlagFile(kProgram, "--hostfile", path);
  if (!text.ok()) return text.status();
  return ParseHostfile(*text, path);
}

int64_t TotalSlots(const std::vector<HostSlots>& hosts) {
  int64_t total = 0;
  for (const HostSlots& host : hosts) total += host.slots;
  return total;
}

}  // namespace troika::agent
