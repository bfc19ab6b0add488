// The Metal library source of one shaders/metal entry-point file, built from
// the kernel sources embedded in the module (cpp/gpu/sources.h): the file with
// every `#include "..."` inlined once, so Metal can compile it at run time
// with newLibraryWithSource (which has no include path for in-memory files).
// Plain C++, so the same amalgamation can be checked off a Mac.
#pragma once
#include <string>
#include <vector>

namespace splat::metal {

// Include search order after the including file's own folder, relative to
// shaders/ (the -I order of the install-time metallib build).
const std::vector<std::string>& metal_include_dirs();

// The amalgamated source of shaders/metal/<metal_file> (e.g. "project.metal").
// Returns false and sets `error` when the file or one of its includes is not
// embedded. `#line` directives keep compiler messages pointing at the
// original files.
bool metal_library_source(const std::string& metal_file, std::string* out, std::string* error);

}  // namespace splat::metal
