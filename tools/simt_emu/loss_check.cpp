// The fused training loss (shaders/kernels/train_loss.h: ssim_forward and
// ssim_backward) on the SIMT emulator, against the CPU backend's schedule
// (cpp/cpu/cpu_loss.cpp) on a random image pair. The per-pixel gradient is
// documented to be the same bits on both (the same float operations in the
// same order); the loss's mean is summed in another order. Prints the loss of
// each and how many gradient values differ, for tests/test_simt_emulation.py.
// With MASKED (a fraction in [0, 1]) that share of the pixels, in random
// blobs and single pixels, is masked out of the loss on both.
//
//   loss_check SEED WIDTH HEIGHT [MASKED]
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "train_loss.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "cpu_loss.h"
#include "thread_pool.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: loss_check SEED WIDTH HEIGHT [MASKED]\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t width = (uint32_t)atoi(argv[2]), height = (uint32_t)atoi(argv[3]);
  const float ssim_weight = 0.2f;
  const size_t pixels = (size_t)width * height;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  std::vector<float> rendered(3 * pixels);
  std::vector<uint8_t> target(3 * pixels);
  // A target, and a render near it (as in training), with some pixels equal
  // to the target (the L1 term's sign is 0 there).
  for (size_t e = 0; e < 3 * pixels; ++e) {
    target[e] = (uint8_t)(uniform(rng) * 255.99f);
    const float t = (float)target[e] * (1.f / 255.f);
    rendered[e] = uniform(rng) < 0.05f ? t : std::min(1.f, std::max(0.f, t + 0.2f * (uniform(rng) - 0.5f)));
  }
  const float masked = argc == 5 ? (float)atof(argv[4]) : 0.f;
  std::vector<uint8_t> mask(pixels, 1);
  size_t valid = pixels;
  if (argc == 5) {
    // Discs of random radius plus scattered single pixels.
    const int discs = 1 + (int)(uniform(rng) * 4.f);
    for (int d = 0; d < discs; ++d) {
      const float cx = uniform(rng) * width, cy = uniform(rng) * height;
      const float r = std::sqrt(masked * (float)pixels / (3.14159f * discs));
      for (uint32_t y = 0; y < height; ++y)
        for (uint32_t x = 0; x < width; ++x)
          if ((x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r) mask[(size_t)y * width + x] = 0;
    }
    for (size_t p = 0; p < pixels; ++p)
      if (uniform(rng) < 0.5f * masked) mask[p] = 0;
    if (masked >= 1.f) std::fill(mask.begin(), mask.end(), 0);
    valid = 0;
    for (size_t p = 0; p < pixels; ++p) valid += mask[p] != 0;
  }
  const uint8_t* mask_arg = argc == 5 ? mask.data() : nullptr;

  splat::cpu::ThreadPool pool(1);
  splat::cpu::CpuLoss cpu(pool);
  std::vector<float> cpu_grad(3 * pixels);
  const float cpu_loss =
      cpu.loss_and_grad(rendered.data(), target.data(), width, height, ssim_weight, cpu_grad.data(), mask_arg);

  // The GPU encoding's parameters (cpp/gpu/gpu_training.cpp).
  const uint32_t tiles_x = (width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  const uint32_t num_tiles = tiles_x * ((height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE);
  const double count = 3.0 * (double)valid;
  const bool any = valid > 0;
  const LossParams lp{width,
                      height,
                      tiles_x,
                      num_tiles,
                      any ? (float)((1.0 - ssim_weight) / count) : 0.f,
                      any ? (float)(-ssim_weight / count) : 0.f,
                      any ? ssim_weight : 0.f,
                      any ? (float)(1.0 / count) : 0.f,
                      mask_arg ? 1u : 0u,
                      0u,
                      0u,
                      0u};
  std::vector<float> partials(9 * pixels), tile_sums(2 * (size_t)num_tiles), loss(4), grad(3 * pixels);
  simt_emu::dispatch(num_tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_QUADS(s_in, SPLAT_LOSS_FWD_IN);
    SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
    SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
    ssim_forward_body(t, lp, rendered.data(), target.data(), mask.data(), partials.data(), tile_sums.data(), s_in, s_h, s_red);
  });
  simt_emu::dispatch(num_tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_QUADS(s_in, SPLAT_LOSS_BWD_IN);
    SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
    SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
    ssim_backward_body(t, lp, rendered.data(), target.data(), mask.data(), partials.data(), tile_sums.data(), grad.data(),
                       loss.data(), s_in, s_h, s_red);
  });

  size_t differ = 0;
  double max_diff = 0.0, max_grad = 0.0;
  for (size_t e = 0; e < 3 * pixels; ++e) {
    if (memcmp(&grad[e], &cpu_grad[e], sizeof(float)) != 0) ++differ;
    max_diff = std::max(max_diff, (double)std::fabs(grad[e] - cpu_grad[e]));
    max_grad = std::max(max_grad, (double)std::fabs(cpu_grad[e]));
  }
  size_t masked_nonzero = 0;  // gradient values of masked pixels that are not +0
  for (size_t p = 0; p < pixels; ++p)
    for (int c = 0; c < 3; ++c)
      if (!mask[p] && (grad[3 * p + c] != 0.f || std::signbit(grad[3 * p + c]))) ++masked_nonzero;
  printf("valid_pixels %zu\nmasked_grad_nonzero %zu\n", valid, masked_nonzero);
  printf("cpu_loss %.9g\ngpu_loss %.9g\ngrad_values %zu\ngrad_differ %zu\ngrad_max_diff %.9g\ngrad_max %.9g\n",
         cpu_loss, loss[0], 3 * pixels, differ, max_diff, max_grad);
  return 0;
}
