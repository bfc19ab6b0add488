#include "sources.h"

namespace splat::gpu {

const EmbeddedSource* find_embedded_source(const std::string& path) {
  for (const auto& s : embedded_sources())
    if (path == s.path) return &s;
  return nullptr;
}

std::string source_file_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<const EmbeddedSource*> kernel_headers() {
  std::vector<const EmbeddedSource*> out;
  for (const auto& s : embedded_sources()) {
    std::string p = s.path;
    if (p.rfind("common/", 0) == 0 || p.rfind("kernels/", 0) == 0) out.push_back(&s);
  }
  return out;
}

}  // namespace splat::gpu
