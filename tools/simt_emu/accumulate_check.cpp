// Several views a step: grad_accumulate_body (shaders/kernels/train_optim.h)
// on the SIMT emulator, dispatched per view as GpuDevice::accumulate_gradients
// does, against the views' float32 sum in view order divided by their number
// (numpy's (g0 + g1 + ...) / B, as the CPU backend computes it). One view of
// the batch overflows its pair buffers (radius[0] = -1): it must add nothing,
// and the batch's views from it on, run again, must give the same mean.
// The views' losses go through the first array's dispatch in the same way.
// Prints `differ` (elements not equal to the bit), `sum_touched` (elements the
// overflowing view changed), `loss_differ` and `count`.
//
//   accumulate_check SEED COUNT VIEWS
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "train_optim.h"

#include <cstring>
#include <random>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: accumulate_check SEED COUNT VIEWS\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t count = (uint32_t)atoi(argv[2]), views = (uint32_t)atoi(argv[3]);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> scale(-30.f, 10.f);
  std::vector<std::vector<float>> g(views, std::vector<float>(count));
  for (auto& v : g)
    for (float& x : v) x = normal(rng) * std::exp2(scale(rng));  // magnitudes far apart: order matters
  std::vector<float> view_loss(views);
  for (float& l : view_loss) l = std::exp2(scale(rng));
  float want_loss = view_loss[0];
  for (uint32_t k = 1; k < views; ++k) want_loss = want_loss + view_loss[k];
  want_loss = want_loss / (float)views;
  std::vector<float> want(count);
  for (uint32_t i = 0; i < count; ++i) {
    float s = g[0][i];
    for (uint32_t k = 1; k < views; ++k) s = s + g[k][i];
    want[i] = s / (float)views;
  }
  std::vector<float> sum(count, 12345.f), grad(count), loss(4, 0.f);
  int32_t ok = 1, overflow = -1;
  const uint32_t bad = (uint32_t)(rng() % views);  // the view whose forward overflows
  const uint32_t groups = (count + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  auto accumulate = [&](uint32_t k, const int32_t* radius) {
    grad = g[k];  // the view's backward wrote its gradient, its loss kernel the loss
    loss[0] = view_loss[k];
    const AccumulateParams p{count, k, views, 1u};
    simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      grad_accumulate_body(t, p, grad.data(), sum.data(), radius, loss.data());
    });
  };
  uint32_t sum_touched = 0;
  for (uint32_t k = 0; k < views; ++k) {  // the first pass: `bad` and the views after it overflow (sticky)
    const std::vector<float> before = sum;
    accumulate(k, k >= bad ? &overflow : &ok);
    if (k >= bad) sum_touched += (uint32_t)count_bit_differences(sum, before);
  }
  for (uint32_t k = bad; k < views; ++k) accumulate(k, &ok);  // the replay from the overflowing view
  const uint32_t differ = (uint32_t)count_bit_differences(grad, want);
  const uint32_t loss_differ = std::memcmp(&loss[0], &want_loss, 4) != 0 ? 1u : 0u;
  printf("differ %u\nsum_touched %u\nloss_differ %u\ncount %u\n", differ, sum_touched, loss_differ, count);
  return 0;
}
