// Densification's gather (shaders/kernels/train_densify.h: each output row's
// source, then a float a thread) on the SIMT emulator, dispatched as
// GpuDevice::densify does, for one array and the offsets the test writes
// (the exclusive scan of the kept | clone | children row counts); the rows
// go back for tests/test_simt_emulation.py to hold against numpy's repeat.
//
//   densify_check IN OUT
// IN: uint32 n, split_count, width, is_log_scales, is_moment; float32
// log_div; uint32 offsets[3n + 1]; float32 src[n * width].
// OUT: float32 dst[offsets[3n] * width] (NaN where nothing was written).
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "train_densify.h"
#include "../../cpp/gpu/grid.h"  // the host's grid sizes

#include <cmath>
#include <limits>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: densify_check IN OUT\n");
    return 2;
  }
  FILE* in = fopen(argv[1], "rb");
  if (!in) return 1;
  uint32_t head[5];
  float log_div = 0.f;
  if (fread(head, 4, 5, in) != 5 || fread(&log_div, 4, 1, in) != 1) return 1;
  DensifyParams p{};
  p.count = head[0];
  p.split_count = head[1];
  p.width = head[2];
  p.is_log_scales = head[3];
  p.is_moment = head[4];
  p.log_div = log_div;
  const uint32_t n = p.count, w = p.width;
  std::vector<uint32_t> offsets(3 * size_t{n} + 1);
  std::vector<float> src(size_t{n} * w);
  if (fread(offsets.data(), 4, offsets.size(), in) != offsets.size() || fread(src.data(), 4, src.size(), in) != src.size())
    return 1;
  fclose(in);
  const uint32_t out = offsets[3 * size_t{n}];
  p.out_count = out;
  std::vector<uint32_t> row_source(out, 0xdeadbeefu);
  std::vector<float> dst(size_t{out} * w, std::numeric_limits<float>::quiet_NaN());
  using splat::gpu::div_up;
  simt_emu::dispatch(div_up(3 * size_t{n}, SPLAT_GROUP_SIZE), SPLAT_GROUP_SIZE,
                     [&](SimtThread t) { densify_sources_body(t, p, offsets.data(), row_source.data()); });
  if (out > 0)
    simt_emu::dispatch(div_up(size_t{out} * w, SPLAT_GROUP_SIZE), SPLAT_GROUP_SIZE,
                       [&](SimtThread t) { densify_gather_body(t, p, row_source.data(), src.data(), dst.data()); });
  FILE* f = fopen(argv[2], "wb");
  if (!f || fwrite(dst.data(), 4, dst.size(), f) != dst.size()) return 1;
  fclose(f);
  return 0;
}
