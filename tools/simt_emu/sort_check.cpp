// The binning's prefix sum (shaders/kernels/scan.h) and stable radix sort
// (radix_sort.h) on the SIMT emulator, dispatched as GpuDevice dispatches
// them (cpp/gpu/gpu_device.cpp: exclusive_scan, radix_sort_slots), against
// std::partial_sum and std::stable_sort. Keys repeat a lot (few distinct
// digits), so stability is exercised. Prints the mismatches, for
// tests/test_simt_emulation.py.
//
//   sort_check SEED COUNT KEY_BITS
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "radix_sort.h"
#include "scan.h"

#include <algorithm>
#include <random>

namespace {

uint32_t div_up(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

void scan_rows(const ScanParams& p, uint32_t rows, uint32_t* data, uint32_t* totals) {
  simt_emu::dispatch(rows, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    scan_rows_body(t, p, data, totals, warp_tot);
  });
}

// out[0..count]: the exclusive sums of in, the total last.
void exclusive_scan(const std::vector<uint32_t>& in, std::vector<uint32_t>& out) {
  const uint32_t count = (uint32_t)in.size(), blocks = div_up(count, SPLAT_SCAN_BLOCK);
  std::vector<uint32_t> sums(blocks);
  out.assign(count + 1, 0u);
  const ScanParams p{count, blocks, blocks, 0};
  simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    scan_block_sums_body(t, p, in.data(), sums.data(), warp_tot);
  });
  scan_rows(p, 1, sums.data(), &out[count]);
  simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    scan_apply_body(t, p, in.data(), sums.data(), out.data(), warp_tot);
  });
}

// Sorts (keys, vals) by the low key_bits of the keys; the result ends in
// the returned pair of buffers.
void radix_sort(std::vector<uint64_t> keys[2], std::vector<uint32_t> vals[2], uint32_t key_bits, int& cur) {
  const uint32_t count = (uint32_t)keys[0].size(), blocks = div_up(count, SPLAT_SORT_BLOCK);
  std::vector<uint32_t> hist((size_t)SPLAT_RADIX * blocks), totals(SPLAT_RADIX);
  cur = 0;
  for (uint32_t pass = 0; pass * SPLAT_RADIX_BITS < key_bits; ++pass) {
    const ScanParams p{count, blocks, blocks, pass * SPLAT_RADIX_BITS};
    simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
      radix_histogram_body(t, p, keys[cur].data(), hist.data(), counts);
    });
    scan_rows(p, SPLAT_RADIX, hist.data(), totals.data());
    simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
      SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
      radix_scatter_body(t, p, keys[cur].data(), vals[cur].data(), keys[1 - cur].data(), vals[1 - cur].data(),
                         hist.data(), totals.data(), counts, warp_tot);
    });
    cur = 1 - cur;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: sort_check SEED COUNT KEY_BITS\n");
    return 2;
  }
  std::mt19937_64 rng(strtoull(argv[1], nullptr, 10));
  const uint32_t count = (uint32_t)atoi(argv[2]), key_bits = (uint32_t)atoi(argv[3]);

  std::vector<uint32_t> in(count), scanned;
  for (uint32_t& v : in) v = (uint32_t)(rng() % 40u);
  exclusive_scan(in, scanned);
  size_t scan_differ = 0;
  uint32_t run = 0;
  for (uint32_t i = 0; i <= count; ++i) {
    scan_differ += scanned[i] != run;
    if (i < count) run += in[i];
  }

  // Keys with few distinct values per digit; the bits above the passes'
  // whole digits set at random (the sort must ignore them).
  const uint32_t sorted_bits = (key_bits + SPLAT_RADIX_BITS - 1) / SPLAT_RADIX_BITS * SPLAT_RADIX_BITS;
  const uint64_t mask = sorted_bits >= 64 ? ~0ull : (1ull << sorted_bits) - 1;
  std::vector<uint64_t> keys[2] = {std::vector<uint64_t>(count), std::vector<uint64_t>(count)};
  std::vector<uint32_t> vals[2] = {std::vector<uint32_t>(count), std::vector<uint32_t>(count)};
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t k = 0;
    for (uint32_t b = 0; b < sorted_bits; b += SPLAT_RADIX_BITS) k |= (uint64_t)(rng() % 5u * 51u) << b;
    keys[0][i] = (k & mask) | (rng() & ~mask);
    vals[0][i] = i;
  }
  std::vector<uint32_t> want(count);
  for (uint32_t i = 0; i < count; ++i) want[i] = i;
  std::stable_sort(want.begin(), want.end(),
                   [&](uint32_t a, uint32_t b) { return (keys[0][a] & mask) < (keys[0][b] & mask); });
  const std::vector<uint64_t> original = keys[0];
  int cur = 0;
  radix_sort(keys, vals, key_bits, cur);
  size_t sort_differ = 0;
  for (uint32_t i = 0; i < count; ++i) sort_differ += vals[cur][i] != want[i] || keys[cur][i] != original[want[i]];

  printf("scan_differ %zu\nsort_differ %zu\n", scan_differ, sort_differ);
  return 0;
}
