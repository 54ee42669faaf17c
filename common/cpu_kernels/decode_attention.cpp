// Decode attention on the CPU: one query token per request against its whole cached context, read
// from the decode stage (common/model/dense_decode_cache.py), where each request's K and V sit in a
// slot of their own:
//     keys[slot, kv_head, position, head_dim]    (values alike), positions 0 .. len-1 in use
// Only each request's own positions are read; the torch path attends the whole allocation, masked.
//
// Work is split over (request, kv_head) pairs. For one pair, with the G query heads of its group:
//     scores[g][j] = scale * q[g] . K[j]                       j in [start, len): the context or its window
//     p[g][j]      = exp(scores[g][j] - max_j) / sum_j(...)    in float32
//     out[g]       = sum_j p[g][j] * V[j]
// K and V are read W = 16 rows at a time, as float32 into a small buffer that every head of the
// group then reads from L1. The 16 dot products of such a group of rows are summed
// across their lanes together (`sum_lanes`), not one by one.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "vec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using namespace pdserve;


// W rows of D values as float32 in `buffer`, read once for every head of the group from L1 (bfloat16
// converted; float32 copied too: one streaming read, then L1, ran faster than every head reading
// the rows where they lie).
template <int D, typename T>
inline const float* as_float(const T* rows, float* buffer) {
  for (int i = 0; i < D; ++i) store(buffer + i * W, load(rows + i * W));
  return buffer;
}

// The W rows at `rows` asked for ahead of their use, a request a cache line. A pair's keys and then
// its values are one stream read a group of rows at a time with arithmetic in between; left to the
// hardware's prefetcher it ran at 24 GB/s where plain reads of the same bytes ran at 38, asked for
// four groups ahead at 30 (float32, SmolLM2's shapes at batch 32 over 600 positions, 30 layers'
// caches, two threads; bfloat16 31 → 33).
constexpr int64_t AHEAD = 4 * W;  // rows
template <int D, typename T>
inline void prefetch_rows(const T* rows) {
  const char* bytes = reinterpret_cast<const char*>(rows);
  for (int64_t b = 0; b < int64_t(W) * D * int64_t(sizeof(T)); b += 64) __builtin_prefetch(bytes + b, 0, 0);
}

struct Shape {
  int64_t batch, heads, kv_heads, slot_stride, head_stride, window;
  float scale;
};

// Request b, kv head h: its G query heads (out the same), its context rows keys/values[0 .. len).
template <typename T, int D>
void attend_one(const T* q, const T* keys, const T* values, T* out, int64_t len, int64_t G, const Shape& s,
                float* scores, float* query, float* acc, float* inv, float* rows) {
  constexpr int C = D / W;
  const int64_t start = s.window > 0 ? std::max<int64_t>(0, len - s.window) : 0;
  const int64_t first = start / W * W, width = (len + W - 1) / W * W - first;  // whole groups of W rows
  for (int64_t i = 0; i < G * D; i += W) store(query + i, load(q + i) * s.scale);
  for (int64_t j0 = first; j0 < std::min(len, first + AHEAD); j0 += W) prefetch_rows<D>(keys + j0 * D);
  for (int64_t j0 = first; j0 < len; j0 += W) {  // the scores, W rows at a time
    const int64_t ahead = j0 + AHEAD, into_values = first + (ahead - len) / W * W;  // past the keys: the values
    if (ahead < len) prefetch_rows<D>(keys + ahead * D);
    else if (into_values < len) prefetch_rows<D>(values + into_values * D);
    const float* block = as_float<D>(keys + j0 * D, rows);
    for (int64_t g = 0; g < G; ++g) {
      vf qv[C], dots[W];
      for (int c = 0; c < C; ++c) qv[c] = load(query + g * D + c * W);
      for (int k = 0; k < W; ++k) {
        dots[k] = qv[0] * load(block + k * D);
        for (int c = 1; c < C; ++c) dots[k] += qv[c] * load(block + k * D + c * W);
      }
      store(scores + g * width + (j0 - first), sum_lanes(dots));
    }
  }
  for (int64_t g = 0; g < G; ++g) {  // softmax; rows outside [start, len) get weight 0
    float* sg = scores + g * width;
    std::fill(sg, sg + (start - first), -3.0e38f);
    std::fill(sg + (len - first), sg + width, -3.0e38f);
    inv[g] = exp_normalise(sg, width);
  }
  std::fill(acc, acc + G * D, 0.0f);
  for (int64_t j0 = first; j0 < len; j0 += W) {  // the weighted sum of the values
    if (j0 + AHEAD < len) prefetch_rows<D>(values + (j0 + AHEAD) * D);
    const float* block = as_float<D>(values + j0 * D, rows);
    const int k0 = int(std::max<int64_t>(0, start - j0)), k1 = int(std::min<int64_t>(W, len - j0));
    for (int64_t g = 0; g < G; ++g) {
      const float* p = scores + g * width + (j0 - first);
      vf a[C];
      for (int c = 0; c < C; ++c) a[c] = load(acc + g * D + c * W);
      for (int k = k0; k < k1; ++k)
        for (int c = 0; c < C; ++c) a[c] += p[k] * load(block + k * D + c * W);
      for (int c = 0; c < C; ++c) store(acc + g * D + c * W, a[c]);
    }
  }
  for (int64_t g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) store(out + g * D + c * W, load(acc + g * D + c * W) * inv[g]);
}

template <typename T, int D>
void attend(const T* q, const T* keys, const T* values, T* out, const int64_t* slots, const int64_t* lens,
            const Shape& s) {
  const int64_t G = s.heads / s.kv_heads;
  int64_t longest = 0;
  for (int64_t b = 0; b < s.batch; ++b) longest = std::max(longest, lens[b]);
  at::parallel_for(0, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(G * (longest + W)), query(G * D), acc(G * D), inv(G);
    alignas(64) float rows[W * D];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.kv_heads, h = task % s.kv_heads, at = (b * s.heads + h * G) * D;
      if (lens[b] <= 0) {  // a padding row
        std::fill(out + at, out + at + G * D, T(0.0f));
        continue;
      }
      const int64_t base = slots[b] * s.slot_stride + h * s.head_stride;
      attend_one<T, D>(q + at, keys + base, values + base, out + at, lens[b], G, s, scores.data(), query.data(),
                       acc.data(), inv.data(), rows);
    }
  });
}

template <typename T>
void attend_any_dim(const T* q, const T* keys, const T* values, T* out, const int64_t* slots, const int64_t* lens,
                    int64_t dim, const Shape& s) {
  switch (dim) {
    case 32: return attend<T, 32>(q, keys, values, out, slots, lens, s);
    case 64: return attend<T, 64>(q, keys, values, out, slots, lens, s);
    case 96: return attend<T, 96>(q, keys, values, out, slots, lens, s);
    case 128: return attend<T, 128>(q, keys, values, out, slots, lens, s);
    case 256: return attend<T, 256>(q, keys, values, out, slots, lens, s);
    default: TORCH_CHECK(false, "dense_decode_attention: head_dim must be 32, 64, 96, 128 or 256, got ", dim);
  }
}

}  // namespace

// q [batch, heads, head_dim]; keys/values [slots, kv_heads, width, head_dim], contiguous; slots
// [batch] int64: each row's slot; lens [batch] int64: each row's context, its new token included
// (0: a padding row, whose output is 0); window 0: none.
torch::Tensor dense_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                     const torch::Tensor& slots, const torch::Tensor& lens, double scale,
                                     int64_t window) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 4 && slots.dim() == 1 && lens.dim() == 1, "dense_decode_attention: shapes");
  TORCH_CHECK(keys.is_contiguous() && values.is_contiguous() && keys.sizes() == values.sizes(),
              "dense_decode_attention: contiguous keys and values of one shape");
  TORCH_CHECK(q.scalar_type() == keys.scalar_type() && q.scalar_type() == values.scalar_type(),
              "dense_decode_attention: q, keys and values of one dtype");
  TORCH_CHECK(slots.scalar_type() == at::kLong && lens.scalar_type() == at::kLong, "dense_decode_attention: int64 slots and lens");
  TORCH_CHECK(keys.size(2) % W == 0, "dense_decode_attention: the width must be a multiple of ", W);
  const auto qc = q.contiguous();
  const auto sl = slots.contiguous();
  const auto l = lens.contiguous();
  const Shape s{q.size(0), q.size(1), keys.size(1), keys.stride(0), keys.stride(1), window, float(scale)};
  TORCH_CHECK(s.heads % s.kv_heads == 0 && sl.size(0) == s.batch && l.size(0) == s.batch && q.size(2) == keys.size(3),
              "dense_decode_attention: shapes");
  for (int64_t b = 0; b < s.batch; ++b) {
    TORCH_CHECK(l.data_ptr<int64_t>()[b] <= keys.size(2), "dense_decode_attention: a context past the width");
    TORCH_CHECK(sl.data_ptr<int64_t>()[b] >= 0 && sl.data_ptr<int64_t>()[b] < keys.size(0), "dense_decode_attention: a slot out of range");
  }
  auto out = torch::empty_like(qc);
  if (q.scalar_type() == at::kBFloat16) {
    using B = c10::BFloat16;
    attend_any_dim<B>(qc.data_ptr<B>(), keys.data_ptr<B>(), values.data_ptr<B>(), out.data_ptr<B>(),
                      sl.data_ptr<int64_t>(), l.data_ptr<int64_t>(), q.size(2), s);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kFloat, "dense_decode_attention: float32 or bfloat16");
    attend_any_dim<float>(qc.data_ptr<float>(), keys.data_ptr<float>(), values.data_ptr<float>(), out.data_ptr<float>(),
                          sl.data_ptr<int64_t>(), l.data_ptr<int64_t>(), q.size(2), s);
  }
  return out;
}

void register_layer_ops(pybind11::module& m);  // layer_ops.cpp
void register_prefill_attention(pybind11::module& m);  // prefill_attention.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  register_layer_ops(m);
  register_prefill_attention(m);
  m.def("dense_decode_attention", &dense_decode_attention, "decode attention over per-request slots of K/V");
}
