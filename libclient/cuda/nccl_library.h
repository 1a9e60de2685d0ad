#pragma once
// NcclLibrary: NCCL's entry points, found at run time (dlopen) instead of linked
// (docs/gpu.md, "Which NCCL").
//
// libtroika lists no libnccl.so.2 among the libraries it needs. If it did, loading libtroika
// (`import troika`) would put its NCCL into the process, and a framework loaded afterwards
// (PyTorch, TensorFlow), whose own libraries need a newer libnccl.so.2, would be handed ours by
// its soname and fail to load ("undefined symbol: ncclCommResume"). Instead the GPU data plane
// calls Load() at its first GPU operation and calls NCCL only through the table below; nccl.h
// still gives the types and constants, which NCCL keeps stable across versions.
//
// Thread contract: Load() is thread-safe. A loaded NcclLibrary is a constant table; its
// functions are NCCL's own, under NCCL's thread rules. The library is never unloaded (NCCL's
// threads and CUDA registrations outlive any owner), so the table stays valid for the process.

#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troika::cuda {

// The oldest NCCL accepted: every function below exists since 2.14 (non-blocking
// communicators), and from 2.17 NCCL reads an ncclConfig_t from newer headers by its size
// field, as ours are (nccl.h of the build).
inline constexpr int kMinNcclVersion = 21701;  // 2.17.1
// The soname the loader's search and "already loaded" look for.
inline constexpr char kNcclSoname[] = "libnccl.so.2";

// The NCCL the build was configured with: libnccl.so.2 in NCCL_LIBRARY's directory.
extern const char kNcclBuildLibrary[];

// "2.28.9" for ncclGetVersion's code (both of NCCL's encodings: 2.8.4 is 2804, 2.28.9 22809).
std::string NcclVersionString(int code);

struct NcclLibraryOptions {
  // Load exactly this library (a path, or a file name for the dynamic loader's search) and
  // nothing else. Options::nccl_library, TROIKA_NCCL_LIBRARY; default empty: search.
  std::string path;
  // The search's last resort, after "already loaded" and the loader's search path: the NCCL
  // the build was configured with; empty: none.
  std::string build_library = kNcclBuildLibrary;
  // The soname looked for as "already loaded" and on the loader's search path (tests name
  // one no machine has).
  std::string soname = kNcclSoname;
};

// NCCL as loaded: which library, its version, and the functions Troika calls (never null).
struct NcclLibrary {
  // Finds NCCL: `options.path` when given; else the libnccl.so.2 the process has already
  // loaded (a framework's, so both share one NCCL), else libnccl.so.2 from the dynamic
  // loader's search (LD_LIBRARY_PATH, libtroika's RUNPATH, ld.so.cache), else
  // `options.build_library`. FAILED_PRECONDITION, naming every place tried and what was there,
  // when none loads, it is older than kMinNcclVersion, or it lacks one of the functions.
  static absl::StatusOr<NcclLibrary> Load(const NcclLibraryOptions& options);

  // UNAVAILABLE naming `what` and NCCL's reason (a peer's failure usually surfaces as one).
  absl::Status Error(ncclResult_t result, const std::string& what) const;

  int version = 0;     // ncclGetVersion's code
  std::string path;    // the file it was loaded from
  std::string origin;  // how it was found: "already loaded in this process", ...

  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclReduce) Reduce = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

}  // namespace troika::cuda
