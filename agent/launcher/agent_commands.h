#pragma once
// The troika-agent processes troikarun starts: on this machine directly, on another host over
// ssh (the job's environment then travels on the agent's stdin, environment_block.h, and the
// agent stops when that stdin ends, control_pipe_launcher.h).
//
// Pure functions; thread-safe.

#include <map>
#include <string>
#include <vector>

#include "agent/launch/process_launcher.h"
#include "agent/launcher/ssh.h"
#include "agent/launcher/troikarun_options.h"

namespace troika::agent {

// What every agent of the job shares.
struct JobLaunch {
  std::string agent;  // troika-agent's path, the same on every host
  std::string job;
  // The agents reach the coordinator in plaintext (troikarun's embedded one without TLS).
  bool plaintext = true;
  // Their --data_interface (a multi-host job); empty: none.
  std::vector<std::string> data_interfaces;
  // troikarun's environment ("NAME=value"): a local agent's; what a remote one is sent is
  // this less what belongs to this host (ForwardedEnvironment).
  std::vector<std::string> environment;
  // Set on top for every agent and rank: the job's token, -x variables, horovodrun's flags.
  std::map<std::string, std::string> variables;
  // A remote agent changes to this directory first, if it exists there (as horovodrun).
  std::string working_directory;
  SshOptions ssh;
};

// Where one agent runs and what it runs.
struct AgentPlacement {
  // The host as the user named it (-H), given to the agent as --host; empty: this machine,
  // the agent's own host name.
  std::string host;
  bool remote = false;  // started over ssh
  int node_rank = 0;
  int nnodes = 1;
  int ranks = 1;
  std::string coordinator;  // the coordinator's address as this host reaches it
};

ProcessSpec AgentSpec(const TroikarunOptions& options, const JobLaunch& job,
                      const AgentPlacement& placement);

}  // namespace troika::agent
