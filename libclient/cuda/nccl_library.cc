#include "libclient/cuda/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef TROIKA_NCCL_BUILD_LIBRARY
#define TROIKA_NCCL_BUILD_LIBRARY ""
#endif

namespace troika::cuda {

const char kNcclBuildLibrary[] = TROIKA_NCCL_BUILD_LIBRARY;

namespace {

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// The file behind `handle` as the loader names it (the path it resolved), else `name`.
std::string LoadedPath(void* handle, const std::string& name) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return name;
}

template <typename F>
void Resolve(void* handle, const char* name, F& f, std::vector<std::string>& missing) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  if (f == nullptr) missing.push_back(name);
}

// The NCCL behind `handle`: a version new enough and every function Troika calls.
absl::StatusOr<NcclLibrary> Bind(void* handle, const std::string& name, std::string origin) {
  NcclLibrary nccl;
  nccl.path = LoadedPath(handle, name);
  nccl.origin = std::move(origin);
  const std::string where = absl::StrCat(nccl.path, " (", nccl.origin, ")");
  std::vector<std::string> missing;
  Resolve(handle, "ncclGetVersion", nccl.GetVersion, missing);
  if (nccl.GetVersion == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(where, " is not NCCL (no ncclGetVersion)"));
  }
  if (ncclResult_t r = nccl.GetVersion(&nccl.version); r != ncclSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": ncclGetVersion failed (error ", static_cast<int>(r), ")"));
  }
  if (nccl.version < kMinNcclVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " is NCCL ", NcclVersionString(nccl.version), ", too old"));
  }
  Resolve(handle, "ncclGetErrorString", nccl.GetErrorString, missing);
  Resolve(handle, "ncclGetLastError", nccl.GetLastError, missing);
  Resolve(handle, "ncclGetUniqueId", nccl.GetUniqueId, missing);
  Resolve(handle, "ncclCommInitRankConfig", nccl.CommInitRankConfig, missing);
  Resolve(handle, "ncclCommGetAsyncError", nccl.CommGetAsyncError, missing);
  Resolve(handle, "ncclCommAbort", nccl.CommAbort, missing);
  Resolve(handle, "ncclAllReduce", nccl.AllReduce, missing);
  Resolve(handle, "ncclBroadcast", nccl.Broadcast, missing);
  Resolve(handle, "ncclReduce", nccl.Reduce, missing);
  Resolve(handle, "ncclReduceScatter", nccl.ReduceScatter, missing);
  Resolve(handle, "ncclSend", nccl.Send, missing);
  Resolve(handle, "ncclRecv", nccl.Recv, missing);
  Resolve(handle, "ncclGroupStart", nccl.GroupStart, missing);
  Resolve(handle, "ncclGroupEnd", nccl.GroupEnd, missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(where, " is NCCL ",
                                                      NcclVersionString(nccl.version),
                                                      " but lacks ", absl::StrJoin(missing, ", ")));
  }
  return nccl;
}

std::string Needed() {
  return absl::StrCat("Troika needs NCCL ", NcclVersionString(kMinNcclVersion),
                      " or newer (built with ", NcclVersionString(NCCL_VERSION_CODE), ")");
}

}  // namespace

std::string NcclVersionString(int code) {
  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9.
  const int major_unit = code < 10000 ? 1000 : 10000;
  return absl::StrCat(code / major_unit, ".", code % major_unit / 100, ".", code % 100);
}

absl::StatusOr<NcclLibrary> NcclLibrary::Load(const NcclLibraryOptions& options) {
  // RTLD_LOCAL: NCCL's symbols stay out of the global scope. A library found wanting is
  // closed again, so that a framework loaded later is not handed it by its soname.
  if (!options.path.empty()) {
    void* handle = dlopen(options.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the GPU data plane cannot use NCCL: TROIKA_NCCL_LIBRARY=", options.path,
                       " does not load: ", DlError(), "; ", Needed()));
    }
    absl::StatusOr<NcclLibrary> nccl = Bind(handle, options.path, "TROIKA_NCCL_LIBRARY");
    if (nccl.ok()) return nccl;
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "the GPU data plane cannot use NCCL: ", nccl.status().message(), "; ", Needed()));
  }
  struct Candidate {
    std::string name;
    int flags;
    const char* origin;
  };
  std::vector<Candidate> candidates = {
      {options.soname, RTLD_NOLOAD, "already loaded in this process"},
      {options.soname, 0, "found by the dynamic loader's search"}};
  if (!options.build_library.empty()) {
    candidates.push_back({options.build_library, 0, "the build's NCCL"});
  }
  std::vector<std::string> tried;
  bool loaded_here = false;  // then the search would only find that one again
  for (const Candidate& c : candidates) {
    if (loaded_here && c.name == options.soname) continue;
    void* handle = dlopen(c.name.c_str(), RTLD_NOW | RTLD_LOCAL | c.flags);
    if (handle == nullptr) {
      std::string error = DlError();  // read even when not shown: it would linger
      tried.push_back((c.flags & RTLD_NOLOAD) != 0
                          ? absl::StrCat("no ", options.soname, " loaded in this process")
                          : std::move(error));
      continue;
    }
    loaded_here = loaded_here || (c.flags & RTLD_NOLOAD) != 0;
    absl::StatusOr<NcclLibrary> nccl = Bind(handle, c.name, c.origin);
    if (nccl.ok()) return nccl;  // never closed: see the header
    dlclose(handle);
    tried.push_back(std::string(nccl.status().message()));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the GPU data plane cannot use NCCL (", absl::StrJoin(tried, "; "), "): ", Needed(),
      ": install it, put its directory on LD_LIBRARY_PATH or set TROIKA_NCCL_LIBRARY to its path"));
}

absl::Status NcclLibrary::Error(ncclResult_t result, const std::string& what) const {
  const char* last = GetLastError(nullptr);
  return absl::UnavailableError(absl::StrCat(what, ": NCCL: ", GetErrorString(result), " (",
                                             last != nullptr ? last : "", ")"));
}

}  // namespace troika::cuda
