// Prints the host's kernel table (cpp/gpu/kernels.cpp) as JSON: for each
// kernel its entry point, source files and the function-constant indices it
// reads, for the host contract check of tools/check_metal.sh.
#include <cstdio>

#include "cpp/gpu/kernels.h"

int main() {
  using namespace splat::gpu;
  std::printf("{\"kernels\": [\n");
  for (size_t k = 0; k < kKernelCount; ++k) {
    const KernelInfo& info = kernel_info(static_cast<Kernel>(k));
    std::printf("  {\"id\": %zu, \"entry\": \"%s\", \"metal\": \"%s\", \"cuda\": \"%s\", \"constants\": [", k, info.entry,
                info.metal_source, info.cuda_source);
    for (size_t i = 0; i < info.constants.size(); ++i)
      std::printf("%s[%d, \"%s\"]", i ? ", " : "", static_cast<int>(info.constants[i]),
                  spec_constant_name(info.constants[i]));
    std::printf("]}%s\n", k + 1 < kKernelCount ? "," : "");
  }
  std::printf("]}\n");
  return 0;
}
