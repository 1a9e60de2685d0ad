// A stand-in NCCL for NcclLibrary's tests (nccl_library_test.cc), built in three variants:
// ncclGetVersion answers FAKE_NCCL_VERSION; with FAKE_NCCL_COMPLETE every other function Troika
// calls exists too, and fails (no test calls them: they only have to be found).

#include <nccl.h>

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = FAKE_NCCL_VERSION;
  return ncclSuccess;
}

#ifdef FAKE_NCCL_COMPLETE
const char* ncclGetErrorString(ncclResult_t) { return "fake NCCL"; }
const char* ncclGetLastError(ncclComm_t) { return "fake NCCL"; }
ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInternalError; }
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) {
  return ncclInternalError;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*) { return ncclInternalError; }
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclInternalError; }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                           cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                        cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInternalError;
}
ncclResult_t ncclGroupStart() { return ncclInternalError; }
ncclResult_t ncclGroupEnd() { return ncclInternalError; }
#endif

}  // extern "C"
