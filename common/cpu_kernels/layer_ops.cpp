// The norms and the rotary embedding of a decoder layer on the CPU, each one pass over its rows
// instead of the several torch calls of the reference (common/model/ops.py), whose arithmetic they
// repeat step for step (SiLU·mul stays torch's: one vectorised call there already, as fast):
//
//     rms_norm:      n = x · 1/sqrt(mean(x²) + eps) in float32, rounded to the dtype; out = w · n
//     add_rms_norm:  residual += delta (rounded to the dtype), then rms_norm(residual)
//     rope:          x·cos + rotate_half(x)·sin, each product rounded to the dtype, then their sum
//
// No product and sum here are contracted into one rounding (the pragma, for this file only: the
// attention kernel wants its fused multiply-adds), as in torch's separate calls, so float32 rope and
// the bfloat16 roundings match the reference bit for bit (the norm's sum of squares runs in another
// order than torch's and may differ in its last bit).
#pragma GCC optimize("fp-contract=off")
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "vec.h"

namespace {

using namespace pdserve;

// rows × width elements per task at least: smaller tasks cost more to hand out than to run
constexpr int64_t GRAIN_ELEMENTS = 16384;
inline int64_t grain(int64_t width) { return std::max<int64_t>(1, GRAIN_ELEMENTS / std::max<int64_t>(1, width)); }

// Rows whose width is not a multiple of W run their last lanes through a W-wide scratch copy.
template <typename T, typename F>
inline void each_vector(int64_t n, F&& body) {
  for (int64_t i = 0; i + W <= n; i += W) body(i, W);
  if (n % W) body(n - n % W, n % W);
}
template <typename T>
inline vf load_n(const T* p, int n) {
  if (n == W) return load(p);
  alignas(64) T tmp[W] = {};
  std::memcpy(tmp, p, n * sizeof(T));
  return load(tmp);
}
template <typename T>
inline void store_n(T* p, vf v, int n) {
  if (n == W) return store(p, v);
  alignas(64) T tmp[W];
  store(tmp, v);
  std::memcpy(p, tmp, n * sizeof(T));
}

template <typename T>
void norm_rows(const T* delta, T* residual, const T* weight, T* out, int64_t rows, int64_t d, float eps) {
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* x = residual + r * d;
      T* o = out + r * d;
      vf squares = {};
      each_vector<T>(d, [&](int64_t i, int n) {
        vf v = load_n(x + i, n);
        if (delta != nullptr) {
          v = round_to(v + load_n(delta + r * d + i, n), x);
          store_n(x + i, v, n);
        }
        squares += v * v;
      });
      float total = 0.0f;
      for (int i = 0; i < W; ++i) total += squares[i];
      const float scale = 1.0f / std::sqrt(total / float(d) + eps);
      each_vector<T>(d, [&](int64_t i, int n) {
        const vf normed = round_to(load_n(x + i, n) * scale, x);
        store_n(o + i, load_n(weight + i, n) * normed, n);
      });
    }
  });
}

template <typename T>
void rope_rows(T* x, const T* cos, const T* sin, int64_t rows, int64_t heads, int64_t d, int64_t row_stride,
               int64_t head_stride) {
  const int64_t half = d / 2;
  at::parallel_for(0, rows, grain(heads * d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* c = cos + r * d;
      const T* s = sin + r * d;
      for (int64_t h = 0; h < heads; ++h) {
        T* v = x + r * row_stride + h * head_stride;
        each_vector<T>(half, [&](int64_t i, int n) {
          const vf a = load_n(v + i, n), b = load_n(v + half + i, n);
          const vf first = round_to(a * load_n(c + i, n), v) + round_to((vf{} - b) * load_n(s + i, n), v);
          const vf second = round_to(b * load_n(c + half + i, n), v) + round_to(a * load_n(s + half + i, n), v);
          store_n(v + i, first, n);
          store_n(v + half + i, second, n);
        });
      }
    }
  });
}

void check_rows(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_contiguous(), what, ": contiguous rows");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, what, ": float32 or bfloat16");
}

}  // namespace

// x [..., d] -> weight · normalised x, a new tensor.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  check_rows(x, "rms_norm");
  TORCH_CHECK(weight.is_contiguous() && weight.scalar_type() == x.scalar_type() && weight.numel() == x.size(-1),
              "rms_norm: a weight of the row's size and dtype");
  auto out = torch::empty_like(x);
  auto residual = x;  // read only: no delta is added
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  AT_DISPATCH_SWITCH(x.scalar_type(), "rms_norm",
      AT_DISPATCH_CASE(at::kFloat, [&] { norm_rows<float>(nullptr, residual.data_ptr<float>(), weight.data_ptr<float>(), out.data_ptr<float>(), rows, d, float(eps)); })
      AT_DISPATCH_CASE(at::kBFloat16, [&] { norm_rows<c10::BFloat16>(nullptr, residual.data_ptr<c10::BFloat16>(), weight.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), rows, d, float(eps)); }));
  return out;
}

// residual += delta (in place), then rms_norm(residual).
torch::Tensor add_rms_norm(const torch::Tensor& delta, torch::Tensor& residual, const torch::Tensor& weight, double eps) {
  check_rows(residual, "add_rms_norm");
  check_rows(delta, "add_rms_norm");
  TORCH_CHECK(delta.sizes() == residual.sizes() && delta.scalar_type() == residual.scalar_type(),
              "add_rms_norm: delta and residual of one shape and dtype");
  TORCH_CHECK(weight.is_contiguous() && weight.scalar_type() == residual.scalar_type() && weight.numel() == residual.size(-1),
              "add_rms_norm: a weight of the row's size and dtype");
  auto out = torch::empty_like(residual);
  const int64_t d = residual.size(-1), rows = d ? residual.numel() / d : 0;
  AT_DISPATCH_SWITCH(residual.scalar_type(), "add_rms_norm",
      AT_DISPATCH_CASE(at::kFloat, [&] { norm_rows<float>(delta.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(), out.data_ptr<float>(), rows, d, float(eps)); })
      AT_DISPATCH_CASE(at::kBFloat16, [&] { norm_rows<c10::BFloat16>(delta.data_ptr<c10::BFloat16>(), residual.data_ptr<c10::BFloat16>(), weight.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), rows, d, float(eps)); }));
  return out;
}

// x [rows, heads, d] (any row and head strides, unit stride inside a head) rotated in place by
// cos/sin [rows, d] (the rows' positions, in x's dtype).
void rope_(torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.dim() == 3 && x.stride(2) == 1 && x.size(2) % 2 == 0, "rope_: x [rows, heads, even d] with unit stride in d");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.dim() == 2 && cos.size(0) == x.size(0) &&
              cos.size(1) == x.size(2) && cos.sizes() == sin.sizes(), "rope_: cos/sin [rows, d], contiguous");
  TORCH_CHECK(cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type(), "rope_: cos/sin in x's dtype");
  AT_DISPATCH_SWITCH(x.scalar_type(), "rope_",
      AT_DISPATCH_CASE(at::kFloat, [&] { rope_rows<float>(x.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), x.size(0), x.size(1), x.size(2), x.stride(0), x.stride(1)); })
      AT_DISPATCH_CASE(at::kBFloat16, [&] { rope_rows<c10::BFloat16>(x.data_ptr<c10::BFloat16>(), cos.data_ptr<c10::BFloat16>(), sin.data_ptr<c10::BFloat16>(), x.size(0), x.size(1), x.size(2), x.stride(0), x.stride(1)); }));
}

void register_layer_ops(pybind11::module& m) {
  m.def("rms_norm", &rms_norm, "weight · rms-normalised rows");
  m.def("add_rms_norm", &add_rms_norm, "residual += delta, then its rms norm");
  m.def("rope_", &rope_, "rotary embedding in place");
}
