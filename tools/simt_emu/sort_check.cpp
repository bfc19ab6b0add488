// The binning's prefix sum (shaders/kernels/scan.h) and stable radix sort
// (radix_sort.h) on the SIMT emulator, dispatched as GpuDevice dispatches
// them (cpp/gpu/gpu_device.cpp: exclusive_scan, scanned_total,
// radix_sort_slots), against std::partial_sum and std::stable_sort. Keys
// repeat a lot (few distinct digits), so stability is exercised. Scanned
// values are below MAX_VALUE (default 40); large ones make sums pass 2^32,
// where the host's total from the block offsets must stay exact (or, for a
// saturated block, a lower bound past 2^32 - 1). Prints the mismatches and
// totals, for tests/test_simt_emulation.py.
//
//   sort_check SEED COUNT KEY_BITS [MAX_VALUE | =VALUE]
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "radix_sort.h"
#include "scan.h"
#include "tile_bin.h"
#include "../../cpp/gpu/grid.h"  // the host's grid sizes

#include <algorithm>
#include <random>

namespace {

using splat::gpu::div_up;

void scan_rows(const ScanParams& p, uint32_t rows, uint32_t* data, uint32_t* totals) {
  simt_emu::dispatch(rows, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    scan_rows_body(t, p, data, totals, warp_tot);
  });
}

// out[0..count]: the exclusive sums of in, the total last (modulo 2^32).
// sums: the scanned block sums, the total last (GpuDevice::exclusive_scan).
void exclusive_scan(const std::vector<uint32_t>& in, std::vector<uint32_t>& out, std::vector<uint32_t>& sums) {
  const uint32_t count = (uint32_t)in.size(), blocks = div_up(count, SPLAT_SCAN_BLOCK);
  sums.assign(blocks + 1, 0u);
  out.assign(count + 1, 0u);
  const ScanParams p{count, blocks, blocks, 0};
  simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    scan_block_sums_body(t, p, in.data(), sums.data(), warp_tot);
  });
  scan_rows(p, 1, sums.data(), &sums[blocks]);
  simt_emu::dispatch(blocks > 0 ? blocks : 1u, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    scan_apply_body(t, p, in.data(), sums.data(), out.data(), warp_tot);
  });
}

// GpuDevice::scanned_total: the exact total from the scanned block offsets.
uint64_t scanned_total(const std::vector<uint32_t>& sums, bool& saturated) {
  uint64_t total = 0;
  saturated = false;
  for (size_t b = 0; b + 1 < sums.size(); ++b) {
    const uint32_t sum = sums[b + 1] - sums[b];
    saturated = saturated || sum == 0xffffffffu;
    total += sum;
  }
  return total;
}

// Sorts (keys, vals) by the low key_bits of the keys; the result ends in
// the returned pair of buffers.
// limit: the count the device holds (radix_sort.h's count_limit).
void radix_sort(std::vector<uint32_t> keys[2], std::vector<uint32_t> vals[2], uint32_t key_bits, int& cur,
                uint32_t limit = 0xffffffffu) {
  const uint32_t count = (uint32_t)keys[0].size(), blocks = div_up(count, SPLAT_SORT_BLOCK);
  std::vector<uint32_t> hist((size_t)SPLAT_RADIX * blocks), totals(SPLAT_RADIX);
  cur = 0;
  for (uint32_t pass = 0; pass * SPLAT_RADIX_BITS < key_bits; ++pass) {
    const ScanParams p{count, blocks, blocks, pass * SPLAT_RADIX_BITS};
    simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
      radix_histogram_body(t, p, keys[cur].data(), &limit, hist.data(), counts);
    });
    scan_rows(p, SPLAT_RADIX, hist.data(), totals.data());
    simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
      SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
      SPLAT_TG_ARRAY(uint32_t, staged, SPLAT_SORT_STAGE_WORDS);
      radix_scatter_body(t, p, keys[cur].data(), vals[cur].data(), &limit, keys[1 - cur].data(),
                         vals[1 - cur].data(), hist.data(), totals.data(), counts, warp_tot, staged);
    });
    cur = 1 - cur;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: sort_check SEED COUNT KEY_BITS [MAX_VALUE]\n");
    return 2;
  }
  std::mt19937_64 rng(strtoull(argv[1], nullptr, 10));
  const uint32_t count = (uint32_t)atoi(argv[2]), key_bits = (uint32_t)atoi(argv[3]);
  // MAX_VALUE "=V": every value V.
  const bool constant = argc == 5 && argv[4][0] == '=';
  const uint64_t max_value = argc == 5 ? strtoull(argv[4] + (constant ? 1 : 0), nullptr, 10) : 40u;

  std::vector<uint32_t> in(count), scanned, sums;
  for (uint32_t& v : in) v = constant ? (uint32_t)max_value : (uint32_t)(rng() % max_value);
  exclusive_scan(in, scanned, sums);
  bool saturated = false;
  const uint64_t total = scanned_total(sums, saturated);
  // Modulo 2^32, as the kernels count (exact while nothing saturates).
  size_t scan_differ = 0;
  uint32_t run = 0;
  uint64_t exact = 0, max_block = 0, block = 0;
  for (uint32_t i = 0; i <= count; ++i) {
    scan_differ += scanned[i] != run;
    if (i == count) break;
    run += in[i];
    exact += in[i];
    block += in[i];
    if ((i + 1) % SPLAT_SCAN_BLOCK == 0 || i + 1 == count) {
      max_block = std::max(max_block, block);
      block = 0;
    }
  }
  if (saturated) scan_differ = 0;  // the offsets after a saturated block are not the sums

  // Keys with few distinct values per digit; the bits above the passes'
  // whole digits set at random (the sort must ignore them).
  const uint32_t sorted_bits = (key_bits + SPLAT_RADIX_BITS - 1) / SPLAT_RADIX_BITS * SPLAT_RADIX_BITS;
  const uint32_t mask = sorted_bits >= 32 ? ~0u : (1u << sorted_bits) - 1u;
  std::vector<uint32_t> keys[2] = {std::vector<uint32_t>(count), std::vector<uint32_t>(count)};
  std::vector<uint32_t> vals[2] = {std::vector<uint32_t>(count), std::vector<uint32_t>(count)};
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t k = 0;
    for (uint32_t b = 0; b < sorted_bits; b += SPLAT_RADIX_BITS) k |= (uint32_t)(rng() % 5u * 51u) << b;
    keys[0][i] = (k & mask) | ((uint32_t)rng() & ~mask);
    vals[0][i] = i;
  }
  std::vector<uint32_t> want(count);
  for (uint32_t i = 0; i < count; ++i) want[i] = i;
  std::stable_sort(want.begin(), want.end(),
                   [&](uint32_t a, uint32_t b) { return (keys[0][a] & mask) < (keys[0][b] & mask); });
  const std::vector<uint32_t> original = keys[0];
  int cur = 0;
  radix_sort(keys, vals, key_bits, cur);
  size_t sort_differ = 0;
  for (uint32_t i = 0; i < count; ++i) sort_differ += vals[cur][i] != want[i] || keys[cur][i] != original[want[i]];

  // A count only the device knows: the grid covers all keys, the first
  // `limit` are sorted (the pairs of a forward sized on the device).
  const uint32_t limit = count ? (uint32_t)(rng() % (count + 1u)) : 0u;
  std::vector<uint32_t> lkeys[2] = {original, std::vector<uint32_t>(count, ~0u)};
  std::vector<uint32_t> lvals[2] = {vals[0], std::vector<uint32_t>(count, 0xffffffffu)};
  for (uint32_t i = 0; i < count; ++i) lvals[0][i] = i;
  std::vector<uint32_t> lwant(limit);
  for (uint32_t i = 0; i < limit; ++i) lwant[i] = i;
  std::stable_sort(lwant.begin(), lwant.end(),
                   [&](uint32_t a, uint32_t b) { return (original[a] & mask) < (original[b] & mask); });
  int lcur = 0;
  radix_sort(lkeys, lvals, key_bits, lcur, limit);
  size_t limited_differ = 0;
  for (uint32_t i = 0; i < limit; ++i) limited_differ += lvals[lcur][i] != lwant[i];

  // pair_total over the same block offsets, against the host's total: a
  // capacity at, just below and above it; then sticky once overflowed.
  size_t pair_total_differ = 0;
  const uint32_t blocks = (uint32_t)sums.size() - 1u;
  PairStatus status{};
  auto pair_total = [&](uint32_t capacity, uint32_t step) {
    const PairParams pp{blocks, capacity, step, 0u};
    simt_emu::dispatch(1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(uint64_t, partial, SPLAT_GROUP_SIZE);
      SPLAT_TG_ARRAY(uint32_t, wrapped, SPLAT_GROUP_SIZE);
      pair_total_body(t, pp, sums.data(), &status, partial, wrapped);
    });
  };
  const uint32_t near = total > 0x7fffffffull ? 0x7fffffffu : (uint32_t)total;
  for (uint32_t capacity : {near, near > 0 ? near - 1u : 0u, near + 17u}) {
    status = PairStatus{};
    status.max_lo = 1u;  // an earlier, smaller total: replaced by the larger one
    pair_total(capacity, 41u);
    const bool fits = !saturated && total <= capacity;
    const uint64_t seen = ((uint64_t)status.max_hi << 32) | status.max_lo;
    pair_total_differ += status.live != (fits ? (uint32_t)total : 0u);
    pair_total_differ += status.overflow != (fits ? 0u : 1u);
    pair_total_differ += !fits && status.first_step != 41u;
    pair_total_differ += status.saturated != (saturated ? 1u : 0u);
    pair_total_differ += seen != std::max<uint64_t>(total, 1u);
    if (!fits) {  // sticky: a later forward that would fit emits nothing, its step not recorded
      pair_total(0xffffffffu, 42u);
      pair_total_differ += status.live != 0u || status.overflow != 1u || status.first_step != 41u;
    }
  }

  printf("limited_differ %zu\npair_total_differ %zu\n", limited_differ, pair_total_differ);
  printf("scan_differ %zu\nsort_differ %zu\ntotal %llu\nexact %llu\nmax_block %llu\nsaturated %d\n", scan_differ,
         sort_differ, (unsigned long long)total, (unsigned long long)exact, (unsigned long long)max_block,
         saturated ? 1 : 0);
  return 0;
}
