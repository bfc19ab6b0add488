#include "nccl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "splat/errors.h"

namespace splat::cuda {
namespace {

std::mutex& nccl_mutex() {
  static std::mutex m;
  return m;
}

std::vector<std::string>& nccl_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

bool nccl_loaded = false;
bool nccl_tried = false;

bool load_nccl_from(const std::string& path, Nccl& n, std::string& why) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = library_error();
    return false;
  }
  std::string missing;
  bind_symbol(lib, n.ncclGetVersion, "ncclGetVersion", missing);
  bind_symbol(lib, n.ncclGetUniqueId, "ncclGetUniqueId", missing);
  bind_symbol(lib, n.ncclCommInitRank, "ncclCommInitRank", missing);
  bind_symbol(lib, n.ncclCommDestroy, "ncclCommDestroy", missing);
  bind_symbol(lib, n.ncclCommAbort, "ncclCommAbort", missing);
  bind_symbol(lib, n.ncclCommGetAsyncError, "ncclCommGetAsyncError", missing);
  bind_symbol(lib, n.ncclAllReduce, "ncclAllReduce", missing);
  bind_symbol(lib, n.ncclGroupStart, "ncclGroupStart", missing);
  bind_symbol(lib, n.ncclGroupEnd, "ncclGroupEnd", missing);
  bind_symbol(lib, n.ncclGetErrorString, "ncclGetErrorString", missing);
  if (!missing.empty()) {
    why = "missing " + missing;
    dlclose(lib);
    return false;
  }
  n.ncclGetVersion(&n.version);
  if (n.version < 21000) {  // ncclAvg came with 2.10
    why = "version " + std::to_string(n.version) + " predates 2.10";
    dlclose(lib);
    return false;
  }
  n.path = path;
  return true;
}

}  // namespace

void add_nccl_search_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(nccl_mutex());
  nccl_dirs().push_back(dir);
  if (!nccl_loaded) nccl_tried = false;
}

const Nccl* nccl(std::string* error) {
  static Nccl n;
  static std::string failure;
  std::lock_guard<std::mutex> lock(nccl_mutex());
  if (!nccl_tried) {
    nccl_tried = true;
    std::string tried;
    nccl_loaded = load_first_candidate(
        "SPLAT_NCCL_LIBRARY", nccl_dirs(), {"libnccl.so.2"}, {"libnccl.so.2"},
        [&](const std::string& path, std::string& why) { return load_nccl_from(path, n, why); }, tried);
    if (!nccl_loaded)
      failure = "NCCL (libnccl.so.2, 2.10 or later) could not be loaded; install the [multigpu] extra (the "
                "nvidia-nccl-cu12 wheel) or set SPLAT_NCCL_LIBRARY to the library's path. Tried:" + tried;
  }
  if (!nccl_loaded) {
    if (error) *error = failure;
    return nullptr;
  }
  return &n;
}

std::string nccl_unique_id() {
  std::string why;
  const Nccl* n = nccl(&why);
  if (!n) throw BackendUnavailable("[cuda] " + why);
  NcclUniqueId id{};
  ncclResult_t r = n->ncclGetUniqueId(&id);
  if (r != NCCL_SUCCESS)
    throw BackendError(std::string("[cuda] ncclGetUniqueId failed: ") + n->ncclGetErrorString(r));
  return std::string(id.internal, sizeof(id.internal));
}

}  // namespace splat::cuda
