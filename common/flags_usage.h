#pragma once
// --help for the binaries whose flags are Abseil flags (troika-coordinator, troikactl, the
// example, the benchmarks). Abseil's own --help exits 1 and heads each group of flags with the
// path of its source file on the build machine ("Flags from /home/.../main.cc:"), and by
// default lists only files named after the binary. ShowFlagsOf names the file whose flags are
// the program's; HandleHelp answers --help itself: the program's usage message and those
// flags, exit 0, no source path. Header-only; the binary links absl::flags_usage and
// absl::flags_parse (which brings absl::flags_reflection).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace troika {

namespace flags_usage_internal {
inline std::string& MainFile() {
  static std::string file;
  return file;
}
}  // namespace flags_usage_internal

// `main_file`: the path suffix of the file defining the flags, e.g. "coordinator/main.cc".
inline void ShowFlagsOf(const char* main_file) {
  flags_usage_internal::MainFile() = main_file;
  absl::FlagsUsageConfig usage;
  usage.contains_helpshort_flags = [main_file](absl::string_view file) {
    return absl::EndsWith(file, main_file);
  };
  usage.contains_help_flags = usage.contains_helpshort_flags;
  absl::SetFlagsUsageConfig(usage);
}

// `text` wrapped at 80 columns, each line indented by `indent` spaces.
inline std::string WrapHelp(absl::string_view text, size_t indent) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > 80) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

// The help text: the usage message (absl::SetProgramUsageMessage, which names the program),
// then each flag of ShowFlagsOf's file, written with its default value, and its help.
inline std::string HelpText() {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), flags_usage_internal::MainFile())) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string text =
      absl::StrCat(absl::ProgramUsageMessage(), "\n\nFlags, with their default values:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    const std::string value = flag->DefaultValue();
    absl::StrAppend(&text, "  --", flag->Name(), value.empty() ? "" : "=", value, "\n",
                    WrapHelp(flag->Help(), 6));
  }
  absl::StrAppend(&text, "  --help\n", WrapHelp("print this help and exit", 6));
  return text;
}

// Call after SetProgramUsageMessage and ShowFlagsOf, before absl::ParseCommandLine: if an
// argument before "--" is -h or a help flag (--help, -help, --helpshort, --helpfull, ...),
// prints HelpText() to stdout and exits 0.
inline void HandleHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") return;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    const absl::string_view name = arg.substr(0, arg.find('='));
    if (name == "h" || absl::StartsWith(name, "help")) {
      std::fputs(HelpText().c_str(), stdout);
      std::exit(0);
    }
  }
}

}  // namespace troika
