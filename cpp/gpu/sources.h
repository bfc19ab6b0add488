// The kernel sources (shaders/common, shaders/kernels, shaders/cuda,
// shaders/metal) embedded into the module at build time
// (embed_sources.cmake), so nothing is read from disk at run time.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace splat::gpu {

struct EmbeddedSource {
  const char* path;  // relative to shaders/, e.g. "common/compat.h"
  const char* text;  // NUL-terminated
  size_t size;       // bytes, without the NUL
};

// Every embedded file (defined by the generated embedded_sources.cpp).
const std::vector<EmbeddedSource>& embedded_sources();

// The file at `path` (relative to shaders/), or null.
const EmbeddedSource* find_embedded_source(const std::string& path);

// The headers kernels include by bare file name: every file of
// shaders/common and shaders/kernels. `name` receives "compat.h" etc.
std::vector<const EmbeddedSource*> kernel_headers();

// The file name part of a path.
std::string source_file_name(const std::string& path);

}  // namespace splat::gpu
