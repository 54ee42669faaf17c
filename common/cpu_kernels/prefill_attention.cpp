// Causal prefill attention on the CPU as GEMMs over blocks of query rows (the arithmetic of
// common/model/cpu_prefill_attention.py, which is the torch path's and this kernel's reference):
//
//     q [n, heads, d]: the chunk's n tokens, at positions first .. first + n - 1
//     keys, values [kv_heads, context, d]: every token up to the chunk's last (context = first + n)
//     query i sees keys 0 .. first + i
//
// For each (kv head, block of `block` query rows), as one task: the block's queries of every head of
// the group, stacked as the rows of one GEMM, times the keys up to the block's last row (scores,
// scaled and rounded to the dtype, as eager attention rounds them); the softmax of each row over its
// visible keys (float32 inside, rounded once; the rest of the row 0), then times the values.
// Tasks run in parallel, each GEMM on one thread: torch's batched GEMMs split over the few kv heads
// kept threads idle, and the mask and softmax were three passes over the scores where this is one.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "vec.h"

namespace {

using namespace pdserve;

// x[0 .. visible) ← softmax(x[0 .. visible)), x[visible .. end) ← 0; `row`: float32 scratch.
template <typename T>
void softmax_row(T* x, int64_t visible, int64_t end, float* row) {
  const int64_t whole = visible / W * W, lanes = (visible + W - 1) / W * W;
  for (int64_t j = 0; j < whole; j += W) store(row + j, load(x + j));
  for (int64_t j = whole; j < lanes; ++j) row[j] = j < visible ? float(x[j]) : -3.0e38f;  // weight 0
  const float inv = exp_normalise(row, lanes);
  for (int64_t j = 0; j < whole; j += W) store(x + j, load(row + j) * inv);
  for (int64_t j = whole; j < visible; ++j) x[j] = T(row[j] * inv);
  std::fill(x + visible, x + end, T(0.0f));
}

template <typename T>
void attend_block(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values, torch::Tensor& out,
                  int64_t h, int64_t start, int64_t rows, int64_t first, double scale, std::vector<float>& row) {
  const int64_t group = q.size(1) / keys.size(0), dim = q.size(2), end = first + start + rows;
  const auto block = q.narrow(0, start, rows).narrow(1, h * group, group).transpose(0, 1).reshape({group * rows, dim});
  auto scores = at::empty({group * rows, end}, q.options());
  at::addmm_out(scores, scores, block, keys[h].narrow(0, 0, end).t(), /*beta=*/0, /*alpha=*/scale);
  T* s = scores.data_ptr<T>();
  row.resize((end + W - 1) / W * W);
  for (int64_t r = 0; r < group * rows; ++r) softmax_row(s + r * end, end - rows + r % rows + 1, end, row.data());
  const auto mixed = at::mm(scores, values[h].narrow(0, 0, end));  // [group * rows, dim]
  out.narrow(0, start, rows).narrow(1, h * group, group).copy_(mixed.view({group, rows, dim}).transpose(0, 1));
}

}  // namespace

// q [n, heads, d]; keys/values [kv_heads, context, d] (any strides; context >= n); returns [n, heads, d].
torch::Tensor prefill_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                double scale, int64_t block) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 3 && keys.sizes() == values.sizes() && q.size(2) == keys.size(2),
              "prefill_attention: q [n, heads, d], keys and values [kv_heads, context, d]");
  TORCH_CHECK(q.size(1) % keys.size(0) == 0 && keys.size(1) >= q.size(0) && block >= 1, "prefill_attention: shapes");
  TORCH_CHECK(q.scalar_type() == keys.scalar_type() && q.scalar_type() == values.scalar_type() &&
              (q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16),
              "prefill_attention: q, keys and values all float32 or all bfloat16");
  const auto k = keys.contiguous();
  const auto v = values.contiguous();
  auto out = at::empty({q.size(0), q.size(1), q.size(2)}, q.options());
  const int64_t n = q.size(0), first = keys.size(1) - n, kv_heads = keys.size(0), blocks = (n + block - 1) / block;
  const at::ThreadLocalState caller;  // inference mode and the like, for the tasks' own torch calls
  at::parallel_for(0, kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    const at::ThreadLocalStateGuard same_state(caller);
    std::vector<float> row;
    for (int64_t task = begin; task < end; ++task) {
      // blocks taken alternately from both ends: a thread's contiguous range of tasks holds as many
      // late (long) blocks as early (short) ones
      const int64_t h = task % kv_heads, t = task / kv_heads;
      const int64_t b = t % 2 == 0 ? t / 2 : blocks - 1 - t / 2;
      const int64_t start = b * block, rows = std::min(block, n - start);
      if (q.scalar_type() == at::kBFloat16) {
        attend_block<c10::BFloat16>(q, k, v, out, h, start, rows, first, scale, row);
      } else {
        attend_block<float>(q, k, v, out, h, start, rows, first, scale, row);
      }
    }
  });
  return out;
}

void register_prefill_attention(pybind11::module& m) {
  m.def("prefill_attention", &prefill_attention, "causal prefill attention as GEMMs over blocks of query rows");
}
