#!/usr/bin/env python3
"""Checks that every source file includes only the layers below its own (docs/architecture.md).

The CMake targets enforce the same order at link time (a layer links only what is below it);
this check also catches a header-only include across layers, which links fine. Usage:
check_layering.py SOURCE_ROOT. Exit status 1 with one line per offending include.
"""

import pathlib
import re
import sys

# A folder (the longest matching prefix of a file's path) and the project folders its files
# may include from, besides their own folder. Anything outside these prefixes (absl, grpc,
# gtest, the generated troika/v1 protos, libclient/include's troika/...) is not checked.
COMMON = ("common/",)
LAYERS = {
    "common/session/": COMMON,
    "common/": COMMON,
    "coordinator/state/": COMMON,
    "coordinator/tuning/": COMMON,
    "coordinator/negotiation/": COMMON,
    "coordinator/inspection/": COMMON + ("coordinator/negotiation/", "coordinator/tuning/"),
    "coordinator/job/": COMMON + ("coordinator/inspection/", "coordinator/negotiation/",
                                  "coordinator/tuning/", "coordinator/state/"),
    "coordinator/service/": COMMON + ("coordinator/job/", "coordinator/inspection/",
                                      "coordinator/negotiation/", "coordinator/tuning/",
                                      "coordinator/state/"),
    # troikactl knows a job only as the value types of JobInfo.
    "coordinator/admin/": COMMON + ("coordinator/job/job_info.h",),
    "coordinator/": COMMON + ("coordinator/service/", "coordinator/job/",
                              "coordinator/state/"),
    "agent/cli/": COMMON,
    "agent/launch/": COMMON,
    "agent/relay/": COMMON,
    "agent/service/": COMMON + ("agent/relay/",),
    "agent/node/": COMMON + ("agent/cli/", "agent/launch/", "agent/relay/", "agent/service/"),
    "agent/launcher/": COMMON + ("agent/cli/", "agent/launch/"),
    "agent/": COMMON + ("agent/node/", "agent/launcher/", "agent/launch/", "agent/cli/"),
    "libclient/transport/": COMMON,
    "libclient/handles/": COMMON,
    "libclient/execution/": COMMON + ("libclient/handles/", "libclient/transport/"),
    # The CUDA device plane implements execution's DevicePlane and knows nothing else of it.
    "libclient/cuda/": COMMON + ("libclient/execution/device_plane.h", "libclient/handles/",
                                 "libclient/transport/"),
    "libclient/control/": COMMON + ("libclient/execution/", "libclient/handles/",
                                    "libclient/transport/"),
    # The public headers include only each other (troika/...), never the library's internals.
    "libclient/include/": (),
    "libclient/": COMMON + ("libclient/",),
}
# Files that embed a layer above their folder's on purpose.
EXCEPTIONS = {
    # troikarun runs a coordinator beside its agents.
    "agent/troikarun_main.cc": ("coordinator/coordinator.h", "coordinator/state/secret.h"),
    # The options of that coordinator, built from troikarun's flags.
    "agent/launcher/embedded_coordinator.h": ("coordinator/coordinator.h",),
    "agent/launcher/embedded_coordinator.cc": ("coordinator/coordinator.h",),
}
PROJECT = ("common/", "coordinator/", "agent/", "libclient/", "python/", "bench/", "tests/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    matches = [f for f in LAYERS if path.startswith(f)]
    return max(matches, key=len) if matches else None


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    checked = 0
    for file in sorted(root.glob("**/*")):
        rel = file.relative_to(root).as_posix()
        if file.suffix not in (".h", ".cc", ".cu") or rel.startswith(("build", "tests/")):
            continue
        folder = folder_of(rel)
        if folder is None:
            continue
        checked += 1
        allowed = (folder,) + LAYERS[folder] + EXCEPTIONS.get(rel, ())
        for include in INCLUDE.findall(file.read_text()):
            if include.startswith(PROJECT) and not include.startswith(allowed):
                problems.append(f"{rel}: includes {include}, above or beside its layer {folder}")
    for line in problems:
        print(line)
    print(f"check_layering: {checked} files, {len(problems)} includes across layers")
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
