// Register-tiled float32 products for prefill attention's two GEMMs, on one thread, sized for
// attention's shapes: a head's 64 or 128 dimensions are too short an inner dimension for a BLAS
// call to amortise its packing (oneDNN's single-thread calls ran at about half a core's FMA rate),
// and a tile of rows here stops at the last key its rows can see, where a BLAS call computes the
// whole rectangle that the causal mask then throws away.
//
//     scores_tile:  S[i, j] = scale · Σ_k A[i, k] · BT[k, j]    A row-major, BT the keys transposed
//     mix_tile:     O[i, d] = Σ_j P[i, j] · V[j, d]              P and V row-major
//
// Each keeps MR × NV vectors of float32 sums in registers; the other operand streams past them, one
// vector load and MR broadcasts per step of the inner dimension. The sums run in the order of the
// inner dimension, one fused multiply-add a term. (In bfloat16 oneDNN's GEMMs stay faster: their
// dot-product instructions take two products an FMA lane.)
#pragma once

#include <cstdint>

#include "vec.h"

namespace pdserve {

// S[r, j0 + v·W + lane] for r < MR rows of A from `a` (row stride `lda`), the inner dimension `depth`.
template <int MR, int NV>
inline void scores_tile(const float* a, int64_t lda, const float* bt, int64_t ldb, float* s, int64_t lds,
                        int64_t depth, float scale) {
  vf acc[MR][NV] = {};
  for (int64_t k = 0; k < depth; ++k) {
    vf b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load(bt + k * ldb + v * W);
    for (int r = 0; r < MR; ++r) {
      const vf x = vf{} + a[r * lda + k];
      for (int v = 0; v < NV; ++v) acc[r][v] += x * b[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store(s + r * lds + v * W, acc[r][v] * scale);
}

// MR rows of S (row-major, stride `lds`): columns [0, cols) in tiles of NV vectors, cols a multiple of W.
template <int MR>
inline void scores_rows(const float* a, int64_t lda, const float* bt, int64_t ldb, float* s, int64_t lds,
                        int64_t depth, int64_t cols, float scale) {
  constexpr int NV = 2;
  int64_t j = 0;
  for (; j + NV * W <= cols; j += NV * W) scores_tile<MR, NV>(a, lda, bt + j, ldb, s + j, lds, depth, scale);
  for (; j < cols; j += W) scores_tile<MR, 1>(a, lda, bt + j, ldb, s + j, lds, depth, scale);
}

// O[r, d0 + v·W + lane] for r < MR rows of P from `p` (stride `ldp`), summed over j < `keys`.
template <int MR, int DV>
inline void mix_tile(const float* p, int64_t ldp, const float* v, int64_t ldv, float* o, int64_t ldo, int64_t keys) {
  vf acc[MR][DV] = {};
  for (int64_t j = 0; j < keys; ++j) {
    vf b[DV];
    for (int d = 0; d < DV; ++d) b[d] = load(v + j * ldv + d * W);
    for (int r = 0; r < MR; ++r) {
      const vf x = vf{} + p[r * ldp + j];
      for (int d = 0; d < DV; ++d) acc[r][d] += x * b[d];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int d = 0; d < DV; ++d) store(o + r * ldo + d * W, acc[r][d]);
}

// MR rows of O: every dimension [0, dim), dim a multiple of W, in tiles of DV vectors.
template <int MR>
inline void mix_rows(const float* p, int64_t ldp, const float* v, int64_t ldv, float* o, int64_t ldo,
                     int64_t keys, int64_t dim) {
  constexpr int DV = 4;
  int64_t d = 0;
  for (; d + DV * W <= dim; d += DV * W) mix_tile<MR, DV>(p, ldp, v + d, ldv, o + d, ldo, keys);
  for (; d < dim; d += W) mix_tile<MR, 1>(p, ldp, v + d, ldv, o + d, ldo, keys);
}

}  // namespace pdserve
