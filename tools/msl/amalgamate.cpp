// Prints the source the Metal backend compiles at run time for one
// shaders/metal file (cpp/metal/metal_source.cpp over the embedded sources),
// so tools/check_metal.sh can syntax-check it off a Mac.
// usage: amalgamate FILE.metal
#include <cstdio>
#include <string>

#include "cpp/metal/metal_source.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE.metal\n", argv[0]);
    return 2;
  }
  std::string out, error;
  if (!splat::metal::metal_library_source(argv[1], &out, &error)) {
    std::fprintf(stderr, "amalgamate: %s\n", error.c_str());
    return 1;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
