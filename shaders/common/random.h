// Counter-based random numbers: a value is a pure function of its key
// (seed, step, index, draw), so every backend draws the same numbers in any
// order and a checkpoint needs only the seed.
#pragma once
#include "compat.h"

SPLAT_FUNC uint32_t hash_u32(uint32_t x) {
  // PCG output permutation over an LCG step.
  uint32_t state = x * 747796405u + 2891336453u;
  uint32_t word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

SPLAT_FUNC uint32_t random_key(uint32_t seed, uint32_t step, uint32_t index, uint32_t draw) {
  return hash_u32(hash_u32(hash_u32(hash_u32(seed) ^ step) ^ index) ^ draw);
}

// Uniform in (0, 1): 24 random bits, never 0.
SPLAT_FUNC float random_uniform(uint32_t key) { return ((key >> 8) + 0.5f) * (1.0f / 16777216.0f); }

// Standard normal from two keys (Box-Muller, cosine branch).
SPLAT_FUNC float random_normal(uint32_t key_a, uint32_t key_b) {
  float u1 = random_uniform(key_a), u2 = random_uniform(key_b);
  return sp_sqrt(-2.f * sp_log(u1)) * sp_cos(6.283185307179586f * u2);
}
