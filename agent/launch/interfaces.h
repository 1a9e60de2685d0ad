#pragma once
// This host's IPv4 network interfaces (getifaddrs(3)): what troika-agent --print_interfaces
// shows troikarun, and how --data_interface NAME becomes the data plane's address.
//
// Thread-safe.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troika::agent {

struct NetworkInterface {
  std::string name;     // "eth0"
  std::string address;  // its IPv4 address, "10.0.0.2"
  bool loopback = false;
  bool operator==(const NetworkInterface&) const = default;
};

// The interfaces that are up and have an IPv4 address, one entry per address, in the order
// the kernel lists them.
std::vector<NetworkInterface> Ipv4Interfaces();

// The IPv4 address of the first of `names` this host has up; NOT_FOUND naming the interfaces
// it has otherwise.
absl::StatusOr<std::string> InterfaceAddress(const std::vector<std::string>& names);

// "eth0 10.0.0.2" lines (with " loopback" after a loopback one), and back. ParseInterfaces
// skips lines it does not read as such.
std::string FormatInterfaces(const std::vector<NetworkInterface>& interfaces);
std::vector<NetworkInterface> ParseInterfaces(const std::string& text);

}  // namespace troika::agent
