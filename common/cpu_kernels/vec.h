// Vectors of 16 float32 lanes for the CPU kernels, as GCC/Clang vector extensions: the compiler
// maps them onto whatever SIMD the build machine has (AVX-512, AVX2, NEON), so no kernel source
// names an instruction set.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

namespace pdserve {

constexpr int W = 16;  // lanes
typedef float vf __attribute__((vector_size(W * 4)));
typedef uint16_t vh __attribute__((vector_size(W * 2)));
typedef uint32_t vu __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
inline vf load(const c10::BFloat16* p) {  // a bfloat16 is the top half of a float32
  vh h;
  std::memcpy(&h, p, sizeof h);
  const vu u = __builtin_convertvector(h, vu) << 16;
  vf v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
// Rounded to nearest even, as c10::BFloat16(float) rounds (a NaN stays a NaN).
inline void store(c10::BFloat16* p, vf v) {
  vu bits;
  std::memcpy(&bits, &v, sizeof bits);
  const vu rounded = (bits + (((bits >> 16) & 1u) + 0x7FFFu)) >> 16;
  const vu nan = vu{} + 0x7FC0u;
  const vh h = __builtin_convertvector(v != v ? nan : rounded, vh);
  std::memcpy(p, &h, sizeof h);
}
// The value a float32 takes stored as T and read back: itself, or rounded to bfloat16.
inline vf round_to(vf v, const float*) { return v; }
inline vf round_to(vf v, const c10::BFloat16*) {
  vu bits;
  std::memcpy(&bits, &v, sizeof bits);
  const vu rounded = (bits + (((bits >> 16) & 1u) + 0x7FFFu)) & 0xFFFF0000u;
  vf out;
  std::memcpy(&out, &rounded, sizeof out);
  return v != v ? v : out;
}

// exp(x) for x in [-87, 88] (clamped there): 2^n · e^f with |f| <= ln2/2 and a degree-7 Taylor
// polynomial, relative error under 2e-7.
inline vf exp_clamped(vf x) {
  const vf lo = vf{} - 87.0f, hi = vf{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const vf t = x * 1.44269504088896341f + 0.5f;
  const vf truncated = __builtin_convertvector(__builtin_convertvector(t, vi), vf);
  const vf n = truncated > t ? truncated - 1.0f : truncated;  // floor(t)
  const vf f = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n·ln2, ln2 in two parts
  const vf p = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720 + f * (1.0f / 5040)))))));
  const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  vf two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

// The largest lane, and the sum of the lanes, by halving (log2(W) shuffles).
inline vf swap_halves(vf v, int half) {
  vi idx;
  for (int i = 0; i < W; ++i) idx[i] = i ^ half;
  return __builtin_shuffle(v, idx);
}
inline float max_lane(vf v) {
  for (int half = W / 2; half >= 1; half /= 2) {
    const vf o = swap_halves(v, half);
    v = v > o ? v : o;
  }
  return v[0];
}
inline float sum_lane(vf v) {
  for (int half = W / 2; half >= 1; half /= 2) v += swap_halves(v, half);
  return v[0];
}

// x[0 .. n) ← exp(x − max(x)) in place, n a positive multiple of W; returns 1 / their sum (what
// each must be scaled by to be the softmax). Lanes that should weigh nothing hold -3e38.
inline float exp_normalise(float* x, int64_t n) {
  vf top = load(x);
  for (int64_t j = W; j < n; j += W) {
    const vf v = load(x + j);
    top = top > v ? top : v;
  }
  const float m = max_lane(top);
  vf sum = {};
  for (int64_t j = 0; j < n; j += W) {
    const vf e = exp_clamped(load(x + j) - m);
    store(x + j, e);
    sum += e;
  }
  return 1.0f / sum_lane(sum);
}

// a and b each hold W / (2S) groups of 2S partial sums; the result holds a's groups then b's, each
// folded to S partial sums (its two halves added).
template <int S>
inline vf fold(vf a, vf b) {
  vi lo, hi;
  for (int i = 0; i < W; ++i) {
    const int group = i / S, per_vector = W / (2 * S), from_b = group >= per_vector;
    lo[i] = from_b * W + (group - from_b * per_vector) * 2 * S + i % S;
    hi[i] = lo[i] + S;
  }
  return __builtin_shuffle(a, b, lo) + __builtin_shuffle(a, b, hi);
}

// Lane k of the result: the sum of v[k]'s lanes.
inline vf sum_lanes(const vf* v) {
  vf b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i) b[i] = fold<8>(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; ++i) c[i] = fold<4>(b[2 * i], b[2 * i + 1]);
  for (int i = 0; i < 2; ++i) d[i] = fold<2>(c[2 * i], c[2 * i + 1]);
  return fold<1>(d[0], d[1]);
}

}  // namespace pdserve
