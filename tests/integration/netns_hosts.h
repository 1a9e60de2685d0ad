#pragma once
// Hosts for real on one machine: network namespaces ("ip netns") joined by veth links through
// a bridge namespace, each host's link named eth0 and numbered SUBNET.1, SUBNET.2, ... in the
// order the hosts are named. The namespaces share this machine's file systems, /dev/shm, IPC
// and host name: a host is what its network says (and, for Troika, its agent's --host).
// Creating and entering namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); Unavailable()
// says why not where that fails (a chroot, some containers), for the test to skip.
//
// Thread contract: single-threaded tests. Header-only.

#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/launcher_helpers.h"

namespace troika::testing {

class NetnsHosts {
 public:
  // `prefix` names the namespaces (PREFIX-br, PREFIX-HOST); `subnet` is "10.231.0".
  NetnsHosts(std::string prefix, std::string subnet, std::string dir)
      : prefix_(std::move(prefix)), subnet_(std::move(subnet)), dir_(std::move(dir)) {}
  ~NetnsHosts() {
    for (pid_t pid : pids_) {
      kill(-pid, SIGKILL);
      WaitWithTimeout(pid, absl::Seconds(5));
    }
    for (const std::string& ns : namespaces_) Sh("ip netns del " + ns);
  }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  // Empty where namespaces can be created and entered here; else why not.
  std::string Unavailable() {
    if (Sh("command -v ip") != 0) return "needs the `ip` tool (Debian: iproute2)";
    // Creating a namespace is not enough: entering one (ip netns exec) also remounts /sys and
    // makes / a slave mount, which fails in a chroot and in some containers.
    const std::string probe = prefix_ + "-probe";
    CommandResult created = RunShell("ip netns add " + probe, dir_, absl::Seconds(20));
    if (created.exit_code != 0) {
      return "cannot create network namespaces here (needs root with CAP_SYS_ADMIN): "
             "`ip netns add` says: " +
             Trimmed(created.err + created.out);
    }
    CommandResult entered = RunShell("ip netns exec " + probe + " true", dir_, absl::Seconds(20));
    Sh("ip netns del " + probe);
    if (entered.exit_code != 0) {
      return "network namespaces can be created but not entered here (a chroot or a "
             "restricted container): `ip netns exec` says: " +
             Trimmed(entered.err + entered.out);
    }
    return "";
  }

  // Creates the bridge and one namespace per host. False (with a test failure) if a step fails.
  bool Create(const std::vector<std::string>& hosts) {
    const std::string br = prefix_ + "-br";
    if (Sh("ip netns add " + br) != 0) return Failed("adding " + br);
    namespaces_.push_back(br);
    if (Sh(absl::StrCat("ip -n ", br, " link add br0 type bridge && ip -n ", br,
                        " link set br0 up")) != 0) {
      return Failed("the bridge");
    }
    for (const std::string& host : hosts) {
      const std::string ns = Namespace(host);
      if (Sh("ip netns add " + ns) != 0) return Failed("adding " + ns);
      namespaces_.push_back(ns);
      hosts_.push_back(host);
      const std::string port = absl::StrCat(prefix_, "p", hosts_.size());
      if (Sh(absl::StrCat("ip link add eth0 netns ", ns, " type veth peer name ", port, " netns ",
                          br, " && ip -n ", br, " link set ", port, " master br0 up && ip -n ", ns,
                          " addr add ", Address(host), "/24 dev eth0 && ip -n ", ns,
                          " link set eth0 up && ip -n ", ns, " link set lo up")) != 0) {
        return Failed("setting up host " + host);
      }
    }
    return true;
  }

  std::string Namespace(const std::string& host) const { return prefix_ + "-" + host; }
  // SUBNET.N for the N-th host named to Create().
  std::string Address(const std::string& host) const {
    for (size_t i = 0; i < hosts_.size(); ++i) {
      if (hosts_[i] == host) return absl::StrCat(subnet_, ".", i + 1);
    }
    ADD_FAILURE() << "no host " << host;
    return "";
  }

  // Starts `command` (a shell command line) in `host`'s namespace, stdout and stderr in
  // DIR/LOG.out and DIR/LOG.err; killed (with its process group) at the end.
  pid_t Start(const std::string& host, const std::string& command, const std::string& log) {
    pid_t pid = StartShell(absl::StrCat("exec ip netns exec ", Namespace(host), " ", command, " >",
                                        dir_, "/", log, ".out 2>", dir_, "/", log, ".err"));
    pids_.push_back(pid);
    return pid;
  }

  // The processes in `host`'s namespace but those named in `except` (their comm), as
  // "PID COMM" strings.
  std::vector<std::string> Processes(const std::string& host,
                                     const std::vector<std::string>& except) {
    CommandResult listed = RunShell("ip netns pids " + Namespace(host), dir_, absl::Seconds(20));
    std::vector<std::string> found;
    for (absl::string_view pid : absl::StrSplit(listed.out, '\n', absl::SkipWhitespace())) {
      const std::string comm(
          absl::StripAsciiWhitespace(ReadFile(absl::StrCat("/proc/", pid, "/comm"))));
      if (comm.empty()) continue;  // exited meanwhile
      bool skip = false;
      for (const std::string& name : except) skip |= comm == name;
      if (!skip) found.push_back(absl::StrCat(pid, " ", comm));
    }
    return found;
  }

  static int Sh(const std::string& command) {
    return WaitWithTimeout(StartShell(command + " >/dev/null 2>&1"), absl::Seconds(20));
  }

 private:
  static std::string Trimmed(const std::string& text) {
    const std::string stripped(absl::StripAsciiWhitespace(text));
    return stripped.empty() ? "(no output)" : stripped;
  }
  bool Failed(const std::string& what) {
    ADD_FAILURE() << "netns: " << what << " failed";
    return false;
  }

  const std::string prefix_, subnet_, dir_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> hosts_;
  std::vector<pid_t> pids_;
};

}  // namespace troika::testing
