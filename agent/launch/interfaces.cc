#include "agent/launch/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace troika::agent {

std::vector<NetworkInterface> Ipv4Interfaces() {
  std::vector<NetworkInterface> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr) continue;
    found.push_back({a->ifa_name, text, (a->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return found;
}

absl::StatusOr<std::string> InterfaceAddress(const std::vector<std::string>& names) {
  const std::vector<NetworkInterface> interfaces = Ipv4Interfaces();
  for (const std::string& name : names) {
    for (const NetworkInterface& i : interfaces) {
      if (i.name == name) return i.address;
    }
  }
  std::vector<std::string> have;
  for (const NetworkInterface& i : interfaces) have.push_back(absl::StrCat(i.name, " ", i.address));
  return absl::NotFoundError(absl::StrCat("no interface named ", absl::StrJoin(names, " or "),
                                          " with an IPv4 address is up here; this host has ",
                                          have.empty() ? "none" : absl::StrJoin(have, ", ")));
}

std::string FormatInterfaces(const std::vector<NetworkInterface>& interfaces) {
  std::string text;
  for (const NetworkInterface& i : interfaces) {
    absl::StrAppend(&text, i.name, " ", i.address, i.loopback ? " loopback" : "", "\n");
  }
  return text;
}

std::vector<NetworkInterface> ParseInterfaces(const std::string& text) {
  std::vector<NetworkInterface> interfaces;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    in_addr address;
    if (words.size() < 2 || words.size() > 3 ||
        inet_pton(AF_INET, words[1].c_str(), &address) != 1 ||
        (words.size() == 3 && words[2] != "loopback")) {
      continue;
    }
    interfaces.push_back({words[0], words[1], words.size() == 3});
  }
  return interfaces;
}

}  // namespace troika::agent
