// cpu_compat.h: lets the Metal kernel bodies of metal/ compile as plain C++ and run on the CPU,
// one fiber per GPU thread, for tests on machines without a GPU (tests/kernels/cpu_emulator.py).
//
// Threadgroups run one after another, in a shuffled order. A threadgroup's fibers take turns in
// order (0, 1, 2, ...), or, after fa_cpu_set_fiber_order(seed != 0), in a seeded random order that
// runs one simdgroup as far as it can go: the next fiber is a random runnable lane of the same
// simdgroup, else one of a random other simdgroup. So a simdgroup passes through several shuffles
// while another has not yet read what it overwrites (a missing threadgroup_barrier shows; with
// strict turns every lane reads before any lane's next shuffle completes). A fault (cpu_emulator.py
// puts a no-access page after every buffer) or a deadlock (no fiber can run) ends the launch: run()
// returns 1 or 2, fa_cpu_fault_address() says where it faulted. `threadgroup` arrays become function
// statics (one threadgroup alive at a time shares them), threadgroup_barrier is a barrier of the
// threadgroup's threads, simdgroup_barrier one of a simdgroup's 32 lanes, and simd_shuffle_xor,
// simd_shuffle and simd_any exchange values through a per-simdgroup buffer between two barriers
// of its lanes. That needs the lanes of a simdgroup to reach every shuffle together, which is the
// rule the kernels follow on the GPU as well. Nothing of the kernels' own text changes:
// metal/decode_attention.h's generic (Metal) helpers are the ones compiled here, so this also
// checks the parts that only the Metal build uses, but for fa_copy_async: here its copies land at
// the copying thread's fa_copy_wait, as cp.async's do (a read that skips the wait sees stale data).
#pragma once

#include <setjmp.h>
#include <signal.h>
#include <ucontext.h>

#include <algorithm>
#include <functional>
#include <random>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

typedef unsigned int uint;
typedef unsigned short ushort;
struct uint3 {
  uint x, y, z;
};

// bfloat16 with round-to-nearest-even, as MLX stores it; half is the compiler's _Float16.
struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  bfloat16_t(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bits = std::isnan(f) ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
  }
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
typedef _Float16 half;

namespace metal {
inline float max(float a, float b) { return std::fmax(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline float exp2(float x) { return std::exp2(x); }
}  // namespace metal

template <typename To, typename From>
inline To as_type(From x) {
  To out;
  std::memcpy(&out, &x, sizeof(To));
  return out;
}

// The emulated machine. A threadgroup's threads are fibers (ucontext) of one OS thread, run in
// turn: a thread runs until it waits at a barrier, then the next one runs. Cheap switches
// instead of OS threads, and the same result on any number of cores.
struct fa_cpu_barrier {
  uint count, arrived = 0, generation = 0;
  void wait();
};
struct fa_cpu_wait {  // what a fiber waits for (random order): `barrier` to pass `generation`
  const fa_cpu_barrier* barrier = nullptr;
  uint generation = 0;
};
struct fa_cpu_copies {  // a thread's fa_copy_async batches, in flight until its fa_copy_wait
  std::vector<std::function<void()>> open;
  std::deque<std::vector<std::function<void()>>> batches;
};
struct fa_cpu_group {
  std::function<void(uint3, uint)> body;
  uint3 position;
  std::vector<ucontext_t> contexts;
  std::vector<std::unique_ptr<char[]>> stacks;
  fa_cpu_barrier threadgroup_sync;
  std::vector<fa_cpu_barrier> simd_sync;
  std::vector<float> simd_values;
  std::vector<fa_cpu_copies> copies;  // reset for each threadgroup: copies left in flight never land
  std::vector<fa_cpu_wait> waits;     // (random order) reset for each threadgroup
  std::vector<char> done;
  uint finished = 0;
  ucontext_t launcher;
};
inline fa_cpu_group* fa_cpu_current = nullptr;
inline uint fa_cpu_tid = 0;  // the GPU thread now running
inline bool fa_cpu_random_order = false;
inline std::mt19937 fa_cpu_order_rng;

extern "C" void fa_cpu_set_fiber_order(unsigned seed) {
  fa_cpu_random_order = seed != 0;
  fa_cpu_order_rng.seed(seed);
}

inline void fa_cpu_deadlock();
inline bool fa_cpu_runnable(const fa_cpu_group& g, uint t) {
  const fa_cpu_wait& w = g.waits[t];
  return !g.done[t] && (w.barrier == nullptr || w.barrier->generation != w.generation);
}
// Random order: a random runnable lane of the current simdgroup, else of any other simdgroup.
inline uint fa_cpu_pick(const fa_cpu_group& g, uint from) {
  const uint n = uint(g.contexts.size()), sg = from / 32, lanes = std::min(32u, n - sg * 32);
  uint candidates[1024], count = 0;
  for (uint l = 0; l < lanes; ++l) {
    const uint t = sg * 32 + l;
    if (t != from && fa_cpu_runnable(g, t)) {
      candidates[count++] = t;
    }
  }
  if (count == 0) {
    for (uint t = 0; t < n; ++t) {
      if (t / 32 != sg && fa_cpu_runnable(g, t)) {
        candidates[count++] = t;
      }
    }
  }
  if (count == 0) {
    if (fa_cpu_runnable(g, from)) {
      return from;
    }
    fa_cpu_deadlock();
  }
  return candidates[fa_cpu_order_rng() % count];
}

inline void fa_cpu_yield() {
  fa_cpu_group& g = *fa_cpu_current;
  const uint from = fa_cpu_tid, n = uint(g.contexts.size());
  fa_cpu_tid = fa_cpu_random_order ? fa_cpu_pick(g, from) : (from + 1) % n;
  if (fa_cpu_tid != from) {
    swapcontext(&g.contexts[from], &g.contexts[fa_cpu_tid]);
  }
}

inline void fa_cpu_barrier::wait() {
  const uint gen = generation;
  if (++arrived == count) {
    arrived = 0;
    ++generation;
    return;
  }
  fa_cpu_current->waits[fa_cpu_tid] = fa_cpu_wait{this, gen};
  while (generation == gen) {
    fa_cpu_yield();
  }
  fa_cpu_current->waits[fa_cpu_tid] = fa_cpu_wait{};
}

inline void fa_cpu_entry() {
  fa_cpu_group& g = *fa_cpu_current;
  g.body(g.position, fa_cpu_tid);
  g.done[fa_cpu_tid] = 1;
  if (++g.finished == g.contexts.size()) {
    setcontext(&g.launcher);  // the last thread out returns to the launch
  }
  while (true) {
    fa_cpu_yield();  // finished: only pass the turn on
  }
}

enum class mem_flags { mem_none, mem_device, mem_threadgroup };
inline void threadgroup_barrier(mem_flags) {
  fa_cpu_current->threadgroup_sync.wait();
}

// Every lane of the simdgroup posts x; `pick` reads the posted values (lane, all 32 of them).
template <typename Pick>
inline float fa_cpu_simd_exchange(float x, Pick pick) {
  const uint sg = fa_cpu_tid / 32, lane = fa_cpu_tid % 32;
  float* values = fa_cpu_current->simd_values.data() + sg * 32;
  values[lane] = x;
  fa_cpu_current->simd_sync[sg].wait();
  const float y = pick(lane, values);
  fa_cpu_current->simd_sync[sg].wait();
  return y;
}
inline float simd_shuffle_xor(float x, ushort mask) {
  return fa_cpu_simd_exchange(x, [mask](uint lane, const float* v) { return v[lane ^ mask]; });
}
inline float simd_shuffle(float x, ushort from) {
  return fa_cpu_simd_exchange(x, [from](uint, const float* v) { return v[from]; });
}
inline void simdgroup_barrier(mem_flags) {
  fa_cpu_current->simd_sync[fa_cpu_tid / 32].wait();
}

// fa_copy_async as cp.async behaves: a copy lands when its thread waits for its batch
// (fa_copy_wait), not before, so a read of a slot that skips the wait sees what was there.
#define FA_HAVE_COPY_ASYNC
template <int N, typename Dst, typename Src>
inline void fa_copy_async(Dst dst, Src src) {
  fa_cpu_current->copies[fa_cpu_tid].open.push_back([dst, src] {
    for (int i = 0; i < N; ++i) {
      dst[i] = src[i];
    }
  });
}
inline void fa_copy_commit() {
  fa_cpu_copies& c = fa_cpu_current->copies[fa_cpu_tid];
  c.batches.push_back(std::move(c.open));
  c.open.clear();
}
template <int PENDING>
inline void fa_copy_wait() {
  fa_cpu_copies& c = fa_cpu_current->copies[fa_cpu_tid];
  for (; c.batches.size() > PENDING; c.batches.pop_front()) {
    for (auto& copy : c.batches.front()) {
      copy();
    }
  }
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
inline bool simd_any(bool x) {
  return fa_cpu_simd_exchange(x ? 1.0f : 0.0f, [](uint, const float* v) {
    return float(std::any_of(v, v + 32, [](float b) { return b != 0.0f; }));
  }) != 0.0f;
}

inline uint simd_or(uint x) {  // (the kernels' masks fit in float's 24 bits)
  return uint(fa_cpu_simd_exchange(float(x), [](uint, const float* v) {
    uint all = 0;
    for (int i = 0; i < 32; ++i) {
      all |= uint(v[i]);
    }
    return float(all);
  }));
}

// Every lane posts x; all[i] is lane i's.
inline void fa_cpu_simd_gather(float x, float* all) {
  fa_cpu_simd_exchange(x, [all](uint, const float* v) {
    std::copy(v, v + 32, all);
    return 0.0f;
  });
}

// Metal's simdgroup_matrix<float, 8, 8> and simdgroup_multiply_accumulate, with Apple's layout
// (as MLX's steel kernels read it): lane holds (row, col) and (row, col + 1), whatever the role.
// The layout is stated here on its own, so a kernel that places elements otherwise fails.
template <typename T, int R, int C>
struct simdgroup_matrix {
  struct elements {
    T x[2];
    T& operator[](int j) { return x[j]; }
  } e;
  elements& thread_elements() { return e; }
};
// The row and first column of a lane's two elements, in that layout.
inline uint fa_cpu_apple_row(uint lane) {
  return (lane / 4 & 4) + lane / 2 % 4;
}
inline uint fa_cpu_apple_col(uint lane) {
  return (lane / 4 & 2) * 2 + lane % 2 * 2;
}
inline void fa_cpu_matrix(const simdgroup_matrix<float, 8, 8>& m, float (&full)[8][8]) {
  float all[2][32];
  for (int j = 0; j < 2; ++j) {
    fa_cpu_simd_gather(m.e.x[j], all[j]);
  }
  for (uint lane = 0; lane < 32; ++lane) {
    const uint row = fa_cpu_apple_row(lane), col = fa_cpu_apple_col(lane);
    full[row][col] = all[0][lane];
    full[row][col + 1] = all[1][lane];
  }
}
inline void simdgroup_multiply_accumulate(simdgroup_matrix<float, 8, 8>& d, const simdgroup_matrix<float, 8, 8>& a,
                                          const simdgroup_matrix<float, 8, 8>& b, const simdgroup_matrix<float, 8, 8>& c) {
  float A[8][8], B[8][8], Cm[8][8];
  fa_cpu_matrix(a, A);
  fa_cpu_matrix(b, B);
  fa_cpu_matrix(c, Cm);
  const uint lane = fa_cpu_tid % 32;
  const uint row = fa_cpu_apple_row(lane), col = fa_cpu_apple_col(lane);
  for (int j = 0; j < 2; ++j) {
    float sum = Cm[row][col + j];
    for (int k = 0; k < 8; ++k) {
      sum += A[row][k] * B[k][col + j];
    }
    d.e.x[j] = sum;
  }
}

// NVIDIA's mma.sync.m16n8k8 with tf32 operands, as PTX's fragment tables state them, for the
// emulation of metal/cuda_compat.h's matrix products (cpu_emulator.py, layout "nvidia"): lane
// (g, t) = (lane / 4, lane % 4) holds A (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B (t, g),
// (t + 4, g); C and D (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). The hardware reads
// only an operand's top 19 bits (tf32): the rest is cut here too.
inline float fa_cpu_tf32(float x) {
  return as_type<float>(as_type<uint32_t>(x) & 0xFFFFE000u);
}
// This lane's four elements of D = A B + C, A (16 x K) and B (K x 8) gathered whole: its own C
// elements c[i] sit at the same (row, col) as its D elements, for either k.
template <int K>
inline void fa_cpu_mma_lane(const float (&A)[16][K], const float (&B)[K][8], const float (&c)[4], float (&d)[4]) {
  const uint lane = fa_cpu_tid % 32, g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const uint row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float sum = c[i];
    for (int k = 0; k < K; ++k) {
      sum += A[row][k] * B[k][col];
    }
    d[i] = sum;
  }
}
inline void fa_cpu_mma_m16n8k8(const float (&a)[4], const float (&b)[2], const float (&c)[4], float (&d)[4]) {
  float all_a[4][32], all_b[2][32];
  for (int i = 0; i < 4; ++i) {
    fa_cpu_simd_gather(a[i], all_a[i]);
  }
  for (int i = 0; i < 2; ++i) {
    fa_cpu_simd_gather(b[i], all_b[i]);
  }
  float A[16][8], B[8][8];
  for (uint lane = 0; lane < 32; ++lane) {
    const uint g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      A[g + 8 * (i % 2)][t + 4 * (i / 2)] = fa_cpu_tf32(all_a[i][lane]);
    }
    for (int i = 0; i < 2; ++i) {
      B[t + 4 * i][g] = fa_cpu_tf32(all_b[i][lane]);
    }
  }
  fa_cpu_mma_lane(A, B, c, d);
}

// mma.sync.m16n8k16 with f16 or bf16 operands (T), as PTX's fragment tables state them: lane
// (g, t) holds A (g, 2t + h), (g + 8, 2t + h), (g, 2t + 8 + h), (g + 8, 2t + 8 + h) in the halves h
// of its registers 0..3; B (2t + h, g), (2t + 8 + h, g) in registers 0 and 1; C and D as m16n8k8.
// Products of 16-bit values are exact in float.
template <typename T>
inline void fa_cpu_mma_m16n8k16(const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4], float (&d)[4]) {
  float all_a[8][32], all_b[4][32];
  const auto element = [](uint32_t word, int h) { return float(as_type<T>(uint16_t(word >> (16 * h)))); };
  for (int i = 0; i < 8; ++i) {
    fa_cpu_simd_gather(element(a[i / 2], i % 2), all_a[i]);
  }
  for (int i = 0; i < 4; ++i) {
    fa_cpu_simd_gather(element(b[i / 2], i % 2), all_b[i]);
  }
  float A[16][16], B[16][8];
  for (uint lane = 0; lane < 32; ++lane) {
    const uint g = lane / 4, t = lane % 4;
    for (int i = 0; i < 8; ++i) {  // register i / 2, half i % 2
      A[g + 8 * (i / 2 % 2)][2 * t + 8 * (i / 4) + i % 2] = all_a[i][lane];
    }
    for (int i = 0; i < 4; ++i) {
      B[2 * t + 8 * (i / 2) + i % 2][g] = all_b[i][lane];
    }
  }
  fa_cpu_mma_lane(A, B, c, d);
}
// Runs body(threadgroup position, thread index) for every thread of every threadgroup.
inline std::unique_ptr<fa_cpu_group> fa_cpu_live;  // the launch's machine (freed after a fault too)
template <typename Body>
inline void fa_cpu_launch(uint3 groups, uint threads, Body body) {
  constexpr size_t STACK_BYTES = 256 * 1024;
  fa_cpu_live = std::make_unique<fa_cpu_group>();
  fa_cpu_group& g = *fa_cpu_live;
  g.body = body;
  g.contexts.resize(threads);
  for (uint t = 0; t < threads; ++t) {
    g.stacks.emplace_back(new char[STACK_BYTES]);
  }
  g.threadgroup_sync.count = threads;
  g.simd_sync.resize((threads + 31) / 32);
  for (auto& b : g.simd_sync) {
    b.count = 32;
  }
  g.simd_values.resize(g.simd_sync.size() * 32);
  fa_cpu_current = &g;
  // Threadgroups run in a shuffled (fixed) order, as a GPU may run them in any: a kernel that
  // counts on an order (say, block NB - 1 finishing last) fails here.
  std::vector<uint3> order;
  for (uint z = 0; z < groups.z; ++z) {
    for (uint y = 0; y < groups.y; ++y) {
      for (uint x = 0; x < groups.x; ++x) {
        order.push_back(uint3{x, y, z});
      }
    }
  }
  std::shuffle(order.begin(), order.end(), std::mt19937(20261129));
  for (const uint3& position : order) {
    g.position = position;
    g.finished = 0;
    g.copies.assign(threads, fa_cpu_copies());
    g.waits.assign(threads, fa_cpu_wait());
    g.done.assign(threads, 0);
    for (uint t = 0; t < threads; ++t) {
      getcontext(&g.contexts[t]);
      g.contexts[t].uc_stack.ss_sp = g.stacks[t].get();
      g.contexts[t].uc_stack.ss_size = STACK_BYTES;
      g.contexts[t].uc_link = nullptr;
      makecontext(&g.contexts[t], fa_cpu_entry, 0);
    }
    fa_cpu_tid = 0;
    swapcontext(&g.launcher, &g.contexts[0]);
  }
  fa_cpu_current = nullptr;
  fa_cpu_live.reset();
}

// Runs launch() with SIGSEGV and SIGBUS caught: 0, or 1 after a fault (its address in
// fa_cpu_fault_address), the launch abandoned. The caller's handlers are restored either way.
inline sigjmp_buf fa_cpu_trap;
inline void* fa_cpu_fault = nullptr;
extern "C" void* fa_cpu_fault_address() { return fa_cpu_fault; }
inline void fa_cpu_on_fault(int, siginfo_t* info, void*) {
  fa_cpu_fault = info->si_addr;
  siglongjmp(fa_cpu_trap, 1);
}
inline void fa_cpu_deadlock() {  // every fiber waits at a barrier that no other can reach
  siglongjmp(fa_cpu_trap, 2);
}
template <typename Launch>
inline int fa_cpu_trapped(Launch launch) {
  struct sigaction trap = {}, old_segv, old_bus;
  trap.sa_sigaction = fa_cpu_on_fault;
  trap.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&trap.sa_mask);
  sigaction(SIGSEGV, &trap, &old_segv);
  sigaction(SIGBUS, &trap, &old_bus);
  fa_cpu_fault = nullptr;
  int faulted = 0;
  switch (sigsetjmp(fa_cpu_trap, 1)) {
    case 0:
      launch();
      break;
    case 1:
      faulted = 1;
      break;
    default:
      faulted = 2;
  }
  if (faulted) {
    fa_cpu_current = nullptr;
    fa_cpu_live.reset();
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return faulted;
}

// Metal's address-space qualifiers, last, so that they do not reach the library headers above.
#define METAL_FUNC inline
#define thread
#define device
#define constant
#define threadgroup static
