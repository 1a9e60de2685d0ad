#pragma once
// horovodrun's flags beyond troikarun's own: those that configure the embedded coordinator
// (the response cache, autotuning, the stall check), those that configure the ranks (set as
// variables of their environment, TroikarunOptions::rank_env), those that ask for what
// troikarun does anyway (accepted), and those with no equivalent here (refused, saying why
// and what to do instead). docs/horovodrun.md lists every one.
//
// Pure functions; thread-safe.

#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// Applies horovodrun flag `name` (as the command-line reader names it: "cache_capacity",
// "no_stall_check") with `value` ("" for a switch) to `options`. nullopt: `name` is none of
// these flags. A refused flag is a usage error saying why.
std::optional<absl::Status> SetHorovodrunFlag(const std::string& name, const std::string& value,
                                              TroikarunOptions& options);

// The flags among them that take no value.
const std::set<std::string>& HorovodrunSwitches();

// What a flag sets, by horovodrun's name for it (its argparse dest, which its config file and
// its "flags override the file" rule use): "no_hierarchical_allreduce" and
// "hierarchical_allreduce" both set "hierarchical_allreduce", "timeline" sets
// "timeline_filename", "gloo" sets "controller"; and one name for each of troikarun's flags
// ("H" and "hosts": "hosts"). Any other flag sets its own name.
std::string SettingOf(const std::string& flag);

// SettingOf of each flag.
std::set<std::string> SettingsOf(const std::set<std::string>& flags);

}  // namespace troika::agent
