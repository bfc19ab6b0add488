// The few NCCL declarations data-parallel ranks use to reduce on the device,
// loaded at run time with dlopen like the driver and NVRTC (cuda_api.h):
// building splat needs no NCCL, and training alone never loads it.
#pragma once
#include <string>

#include "cuda_api.h"

namespace splat::cuda {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
constexpr ncclResult_t NCCL_SUCCESS = 0;
constexpr ncclResult_t NCCL_IN_PROGRESS = 7;
// ncclDataType_t and ncclRedOp_t values (nccl.h).
constexpr int NCCL_FLOAT32 = 7;
constexpr int NCCL_SUM = 0;
constexpr int NCCL_MAX = 2;
constexpr int NCCL_AVG = 4;  // NCCL 2.10 and later

// ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank.
struct NcclUniqueId {
  char internal[128];
};
static_assert(sizeof(NcclUniqueId) == 128, "ncclUniqueId layout");

struct Nccl {
  std::string path;  // the library that was loaded
  int version = 0;   // e.g. 22105 for 2.21.5
  ncclResult_t (*ncclGetVersion)(int*);
  ncclResult_t (*ncclGetUniqueId)(NcclUniqueId*);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, NcclUniqueId, int);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, CUstream);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  const char* (*ncclGetErrorString)(ncclResult_t);
};

// NCCL, loaded once. Search order: $SPLAT_NCCL_LIBRARY (a file path); the
// directories registered with add_nccl_search_dir (the Python module adds the
// nvidia-nccl-cu12 wheel's lib directory); then the system loader with
// libnccl.so.2 (a copy torch has loaded answers to that name). Null with
// `error` listing what was tried when none loads (or it predates ncclAvg).
const Nccl* nccl(std::string* error);
void add_nccl_search_dir(const std::string& dir);

// A new communicator id (128 bytes) for rank 0 to hand to the others.
std::string nccl_unique_id();

}  // namespace splat::cuda
