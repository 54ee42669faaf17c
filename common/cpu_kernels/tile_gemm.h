// A register-tiled float32 product for prefill attention's two GEMMs, on one thread, sized for
// attention's shapes: a head's 64 or 128 dimensions are too short an inner dimension for a BLAS
// call to amortise its packing (oneDNN's single-thread calls ran at about half a core's FMA rate),
// and a tile of rows here stops at the last key its rows can see, where a BLAS call computes the
// whole rectangle that the causal mask then throws away.
//
//     C[i, j] = scale · Σ_k A[i, k] · B[k, j]     A, B and C row-major
//
// scores are Q times the keys transposed (scale: the softmax's), the output the probabilities times
// V (scale 1). A tile keeps MR × NV vectors of sums in registers while B streams past them, one
// vector load and MR broadcasts per step of k; the sums run in the order of k, one fused
// multiply-add a term. (In bfloat16 oneDNN's GEMMs stay faster: their dot-product instructions
// take two products a lane.)
#pragma once

#include <cstdint>

#include "vec.h"

namespace pdserve {

// C[r, v·W + lane] for r < MR, v < NV.
template <int MR, int NV>
inline void product_tile(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                         int64_t depth, float scale) {
  vf acc[MR][NV] = {};
  for (int64_t k = 0; k < depth; ++k) {
    vf row[NV];
    for (int v = 0; v < NV; ++v) row[v] = load(b + k * ldb + v * W);
    for (int r = 0; r < MR; ++r) {
      const vf x = vf{} + a[r * lda + k];
      for (int v = 0; v < NV; ++v) acc[r][v] += x * row[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store(c + r * ldc + v * W, acc[r][v] * scale);
}

// MR rows of C, columns [0, cols) (a multiple of W): tiles of NV vectors, then of one.
template <int MR, int NV>
inline void product_rows(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                         int64_t depth, int64_t cols, float scale) {
  int64_t j = 0;
  for (; j + NV * W <= cols; j += NV * W) product_tile<MR, NV>(a, lda, b + j, ldb, c + j, ldc, depth, scale);
  for (; j < cols; j += W) product_tile<MR, 1>(a, lda, b + j, ldb, c + j, ldc, depth, scale);
}

}  // namespace pdserve
