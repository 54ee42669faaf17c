// The softmax of a block of causal prefill attention scores, in place (common/model/cpu_prefill_attention.py):
//
//     scores[head, row, key]   row = query i of the block (of n), keys 0 .. end-1
//     query i sees keys 0 .. end - n + i; the rest of its row becomes 0
//
// One pass a row where torch makes three (the mask's add, then softmax's own): the visible keys are
// read once into float32, their exponentials summed there, and written back normalised in the
// scores' dtype. As torch's softmax of bfloat16: float32 inside, rounded once at the end.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "vec.h"

namespace {

using namespace pdserve;

template <typename T>
void softmax_rows(T* scores, int64_t rows, int64_t n, int64_t end) {
  const int64_t padded = (end + W - 1) / W * W;
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, end)), [&](int64_t begin, int64_t stop) {
    std::vector<float> row(padded);
    for (int64_t r = begin; r < stop; ++r) {
      T* x = scores + r * end;
      const int64_t visible = end - n + r % n + 1;
      const int64_t whole = visible / W * W, lanes = (visible + W - 1) / W * W;
      for (int64_t j = 0; j < whole; j += W) store(row.data() + j, load(x + j));
      for (int64_t j = whole; j < lanes; ++j) row[j] = j < visible ? float(x[j]) : -3.0e38f;  // weight 0
      vf top = load(row.data());
      for (int64_t j = W; j < lanes; j += W) {
        const vf v = load(row.data() + j);
        top = top > v ? top : v;
      }
      float m = top[0];
      for (int i = 1; i < W; ++i) m = std::max(m, top[i]);
      vf sum = {};
      for (int64_t j = 0; j < lanes; j += W) {
        const vf e = exp_clamped(load(row.data() + j) - m);
        store(row.data() + j, e);
        sum += e;
      }
      float total = 0.0f;
      for (int i = 0; i < W; ++i) total += sum[i];
      const float inv = 1.0f / total;
      for (int64_t j = 0; j < whole; j += W) store(x + j, load(row.data() + j) * inv);
      for (int64_t j = whole; j < visible; ++j) x[j] = T(row[j] * inv);
      std::fill(x + visible, x + end, T(0.0f));
    }
  });
}

}  // namespace

// scores [..., rows of n queries, end keys], contiguous, float32 or bfloat16: row r is query r % n.
void causal_softmax_(torch::Tensor& scores, int64_t n) {
  TORCH_CHECK(scores.is_contiguous() && scores.dim() >= 2, "causal_softmax_: contiguous scores");
  const int64_t end = scores.size(-1), rows = scores.numel() / std::max<int64_t>(1, end);
  TORCH_CHECK(n >= 1 && n <= end && scores.size(-2) % n == 0, "causal_softmax_: rows in whole blocks of n <= end");
  if (scores.scalar_type() == at::kBFloat16) {
    softmax_rows<c10::BFloat16>(scores.data_ptr<c10::BFloat16>(), rows, n, end);
  } else {
    TORCH_CHECK(scores.scalar_type() == at::kFloat, "causal_softmax_: float32 or bfloat16");
    softmax_rows<float>(scores.data_ptr<float>(), rows, n, end);
  }
}

void register_causal_softmax(pybind11::module& m) {
  m.def("causal_softmax_", &causal_softmax_, "softmax of causal attention scores in place");
}
