// A host emulation of the SIMT dialect (shaders/common/compat.h) for checking
// kernel bodies without a GPU: each threadgroup runs as one fiber per thread
// on one OS thread, and every SIMD-group operation and threadgroup barrier is
// a rendezvous where the fiber yields until its SIMD group (or threadgroup)
// has arrived. It checks the bodies' logic (chunking, chaining, lane roles,
// skips, reductions), not a GPU's memory model, timing or arithmetic: the
// math is the host's (exact exp and division, no FMA unless the host fuses).
//
// Include this before any kernel header. Threadgroups run one at a time, so
// SPLAT_TG_ARRAY declares a function-static array: shared by the fibers of
// the running group, as threadgroup memory is.
#pragma once
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "compat.h"

#if !defined(SPLAT_TARGET_HOST)
#error "simt_emu.h emulates the SIMT targets on the host"
#endif
#define SPLAT_SIMT 1
#define SPLAT_TG_ARRAY(type, name, count) static type name[count]
#define SPLAT_TG_QUADS(name, count) alignas(16) static float name[count]

struct SimtThread {
  uint32_t tid, group, group_size, lane, warp;
};

namespace simt_emu {

struct Scheduler {
  int threads = 0;
  int current = -1;
  uint32_t group = 0;
  ucontext_t main_ctx;
  std::vector<ucontext_t> ctx;
  std::vector<std::vector<char>> stacks;
  std::vector<char> exited;
  std::vector<uint64_t> simd_ops;   // SIMD-group operations each thread has entered
  std::vector<uint64_t> barriers;   // barriers each thread has entered
  std::vector<uint64_t> deposit[2];  // each thread's operand, by parity of its operation
  uint64_t progress = 0;            // any thread entered an operation or exited
  std::function<void(SimtThread)> body;
};

inline Scheduler& scheduler() {
  static Scheduler s;
  return s;
}

inline void yield() {
  Scheduler& s = scheduler();
  swapcontext(&s.ctx[s.current], &s.main_ctx);
}

// Lane `me`'s result of a SIMD-group operation on the live lanes' operands.
// Operands are double-buffered by the parity of the operation: a lane can
// only start operation c + 2 once every lane has entered c + 1, i.e. has
// finished reading c.
template <class T, class Combine>
T simd_op(T operand, Combine combine) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "operands are at most 8 bytes");
  Scheduler& s = scheduler();
  const int me = s.current, first = me / 32 * 32;
  const uint64_t c = s.simd_ops[me];
  uint64_t raw = 0;
  memcpy(&raw, &operand, sizeof(T));
  s.deposit[c & 1][me] = raw;
  s.simd_ops[me] = c + 1;
  s.progress++;
  for (;;) {
    bool all = true;
    for (int l = first; l < first + 32 && l < s.threads; ++l) all = all && (s.exited[l] || s.simd_ops[l] > c);
    if (all) break;
    yield();
  }
  T values[32] = {};
  for (int l = 0; l < 32 && first + l < s.threads; ++l)
    if (s.simd_ops[first + l] > c) memcpy(&values[l], &s.deposit[c & 1][first + l], sizeof(T));
  return combine(values, me - first);
}

inline void run_group(int threads) {
  Scheduler& s = scheduler();
  s.exited.assign(threads, 0);
  s.simd_ops.assign(threads, 0);
  s.barriers.assign(threads, 0);
  s.deposit[0].assign(threads, 0);
  s.deposit[1].assign(threads, 0);
  for (int i = 0; i < threads; ++i) {
    getcontext(&s.ctx[i]);
    s.ctx[i].uc_stack.ss_sp = s.stacks[i].data();
    s.ctx[i].uc_stack.ss_size = s.stacks[i].size();
    s.ctx[i].uc_link = nullptr;
    makecontext(&s.ctx[i], (void (*)())(+[] {
                  Scheduler& sc = scheduler();
                  const int me = sc.current;
                  sc.body(SimtThread{(uint32_t)me, sc.group, (uint32_t)sc.threads, (uint32_t)me % 32,
                                     (uint32_t)me / 32});
                  sc.exited[me] = 1;
                  sc.progress++;
                  swapcontext(&sc.ctx[me], &sc.main_ctx);
                }),
                0);
  }
  for (;;) {
    bool running = false;
    const uint64_t before = s.progress;
    for (int i = 0; i < threads; ++i) {
      if (s.exited[i]) continue;
      running = true;
      s.current = i;
      swapcontext(&s.main_ctx, &s.ctx[i]);
    }
    if (!running) return;
    if (s.progress == before) {
      fprintf(stderr, "[simt_emu] threadgroup %u: every thread waits (a SIMD operation or barrier outside "
                      "uniform control flow)\n", s.group);
      exit(3);
    }
  }
}

// Runs `groups` threadgroups of `threads` threads (a multiple of 32), one
// group after another.
inline void dispatch(uint32_t groups, int threads, std::function<void(SimtThread)> body) {
  Scheduler& s = scheduler();
  s.threads = threads;
  s.body = std::move(body);
  s.ctx.resize(threads);
  s.stacks.resize(threads);
  for (auto& st : s.stacks) st.resize(256 * 1024);
  for (uint32_t g = 0; g < groups; ++g) {
    s.group = g;
    run_group(threads);
  }
}

}  // namespace simt_emu

// The dialect's SIMT operations (compat.h), on the emulator.
inline float simd_sum(float v) {
  return simt_emu::simd_op(v, [](const float* x, int) {
    float s = 0.f;
    for (int l = 0; l < 32; ++l) s += x[l];
    return s;
  });
}
inline uint32_t simd_max(uint32_t v) {
  return simt_emu::simd_op(v, [](const uint32_t* x, int) {
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m = x[l] > m ? x[l] : m;
    return m;
  });
}
inline uint32_t simd_or(uint32_t v) {
  return simt_emu::simd_op(v, [](const uint32_t* x, int) {
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m |= x[l];
    return m;
  });
}
inline uint32_t sp_simd_ballot(bool p) {
  return simt_emu::simd_op((uint32_t)p, [](const uint32_t* x, int) {
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m |= (x[l] ? 1u : 0u) << l;
    return m;
  });
}
inline bool simd_any(bool p) { return sp_simd_ballot(p) != 0u; }
inline float simd_shuffle_xor(float v, uint32_t mask) {
  return simt_emu::simd_op(v, [mask](const float* x, int me) { return x[me ^ (int)mask]; });
}
inline uint32_t simd_prefix_exclusive_sum(uint32_t v) {
  return simt_emu::simd_op(v, [](const uint32_t* x, int me) {
    uint32_t s = 0;
    for (int l = 0; l < me; ++l) s += x[l];
    return s;
  });
}
inline void sp_group_barrier() {
  simt_emu::Scheduler& s = simt_emu::scheduler();
  const int me = s.current;
  const uint64_t c = s.barriers[me];
  s.barriers[me] = c + 1;
  s.progress++;
  for (;;) {
    bool all = true;
    for (int l = 0; l < s.threads; ++l) all = all && (s.exited[l] || s.barriers[l] > c);
    if (all) return;
    simt_emu::yield();
  }
}
// A rendezvous of the SIMD group (fibers do not run in lockstep, so the
// kernels' SIMD-group barriers must hold here).
inline void sp_simd_barrier() {
  simt_emu::simd_op((uint32_t)0, [](const uint32_t*, int) { return 0u; });
}
// One OS thread: a plain add is atomic.
inline void sp_atomic_add(float* p, float v) { *p += v; }
inline void sp_atomic_add_u32(uint32_t* p, uint32_t v) { *p += v; }
inline void sp_atomic_min_u32(uint32_t* p, uint32_t v) { *p = v < *p ? v : *p; }
inline uint32_t sp_opaque(uint32_t v) { return v; }
inline vec4 load_float4(const float* p, uint32_t q) {
  return make_vec4(p[4 * q], p[4 * q + 1], p[4 * q + 2], p[4 * q + 3]);
}
inline void store_float4(float* p, uint32_t q, float a, float b, float c, float d) {
  p[4 * q] = a;
  p[4 * q + 1] = b;
  p[4 * q + 2] = c;
  p[4 * q + 3] = d;
}
inline vec4 load_tg_float4(const float* p, uint32_t q) { return load_float4(p, q); }
inline void store_tg_float4(float* p, uint32_t q, vec4 v) { store_float4(p, q, v.x, v.y, v.z, v.w); }
inline vec2 load_tg_float2(const float* p, uint32_t i) { return make_vec2(p[2 * i], p[2 * i + 1]); }
inline uint32_t sp_popcount(uint32_t x) { return (uint32_t)__builtin_popcount(x); }
inline uint32_t sp_ctz(uint32_t x) { return (uint32_t)__builtin_ctz(x); }
