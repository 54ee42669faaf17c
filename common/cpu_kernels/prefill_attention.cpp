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
// In float32 the GEMMs are the register tiles of tile_gemm.h (1.4-1.9x oneDNN's at SmolLM2's and a
// Llama-8B's head shapes, 300 to 2,048 tokens, two threads); in bfloat16 they are oneDNN's.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tile_gemm.h"
#include "vec.h"

namespace {

using namespace pdserve;

// GEMM dimensions that vary with the prompt (the last block's rows, a block's keys) are padded to
// multiples of `grain` (the caller's; 1: none): oneDNN builds (JIT-compiles) a kernel for every new
// shape and keeps about a thousand, so prompts of every length kept a serving worker compiling.
inline int64_t round_up(int64_t x, int64_t grain) { return (x + grain - 1) / grain * grain; }

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
void attend_block(const torch::Tensor& grouped_q, const torch::Tensor& keys, const torch::Tensor& values,
                  torch::Tensor& grouped_out, int64_t h, int64_t start, int64_t rows, int64_t first, double scale,
                  int64_t grain, torch::Tensor& scratch, std::vector<float>& row) {
  const int64_t group = grouped_q.size(2), dim = grouped_q.size(3), end = first + start + rows;
  // GEMM shapes in whole grains: the query rows' padding (zero queries) and the keys past `end`
  // (later tokens, or zeros past the context) get weight 0
  const int64_t padded_rows = round_up(rows, grain), padded_end = round_up(end, grain), m = group * padded_rows;
  // rows (r, g): query row start + r of the group's head g; contiguous in the grouped layout
  const auto block = grouped_q[h].narrow(0, start, padded_rows).view({m, dim});
  auto scores = scratch.narrow(0, 0, m * padded_end).view({m, padded_end});
  at::addmm_out(scores, scores, block, keys[h].narrow(0, 0, padded_end).t(), /*beta=*/0, /*alpha=*/scale);
  T* s = scores.data_ptr<T>();
  row.resize((padded_end + W - 1) / W * W);
  for (int64_t r = 0; r < m; ++r)
    softmax_row(s + r * padded_end, std::min(end - rows + r / group + 1, end), padded_end, row.data());
  auto mixed = grouped_out[h].narrow(0, start, padded_rows).view({m, dim});
  at::mm_out(mixed, scores, values[h].narrow(0, 0, padded_end));
}

// float32 with head dimensions and padded keys in whole vectors: the two products by tile_gemm.h,
// each tile of rows stopping at the keys its last query row sees (a query row is `group`
// consecutive rows here). `kt` [kv_heads, d, padded context]: the keys transposed.
// A tile's rows (they divide a block's rows, whole grains) and vectors of columns: 16 sums each.
constexpr int SCORE_ROWS = 8, SCORE_VECTORS = 2, MIX_ROWS = 4, MIX_VECTORS = 4;
void attend_block_tiled(const torch::Tensor& grouped_q, const torch::Tensor& kt, const torch::Tensor& values,
                        torch::Tensor& grouped_out, int64_t h, int64_t start, int64_t rows, int64_t first, double scale,
                        int64_t grain, torch::Tensor& scratch, std::vector<float>& row) {
  const int64_t group = grouped_q.size(2), dim = grouped_q.size(3), end = first + start + rows;
  const int64_t padded_rows = round_up(rows, grain), padded_end = round_up(end, grain), m = group * padded_rows;
  const int64_t offset = (h * grouped_q.size(1) + start) * group * dim;  // both grouped layouts are contiguous
  const float* q = grouped_q.data_ptr<float>() + offset;
  float* out = grouped_out.data_ptr<float>() + offset;
  const float* keys_t = kt[h].data_ptr<float>();
  const float* v = values[h].data_ptr<float>();
  float* s = scratch.data_ptr<float>();
  const auto seen = [&](int64_t r) { return std::min(end - rows + r / group + 1, end); };  // keys row r sees
  for (int64_t i = 0; i < m; i += SCORE_ROWS)
    product_rows<SCORE_ROWS, SCORE_VECTORS>(q + i * dim, dim, keys_t, kt.size(2), s + i * padded_end, padded_end,
                                            dim, round_up(seen(i + SCORE_ROWS - 1), W), float(scale));
  row.resize(padded_end);
  for (int64_t r = 0; r < m; ++r) softmax_row(s + r * padded_end, seen(r), padded_end, row.data());
  for (int64_t i = 0; i < m; i += MIX_ROWS)
    product_rows<MIX_ROWS, MIX_VECTORS>(s + i * padded_end, padded_end, v, dim, out + i * dim, dim,
                                        seen(i + MIX_ROWS - 1), dim, 1.0f);
}

// `t` [a, b, c (, d)] as a contiguous tensor whose dimension `dim` is padded with zeros to `size`.
torch::Tensor padded(const torch::Tensor& t, int64_t dim, int64_t size) {
  if (t.size(dim) == size) return t.contiguous();
  auto sizes = t.sizes().vec();
  sizes[dim] = size;
  auto out = at::empty(sizes, t.options());
  out.narrow(dim, 0, t.size(dim)).copy_(t);
  out.narrow(dim, t.size(dim), size - t.size(dim)).zero_();
  return out;
}

}  // namespace

// q [n, heads, d]; keys/values [kv_heads, context, d] (any strides; context >= n); returns [n, heads, d].
// `tiles`: float32's products by tile_gemm.h where the shapes allow (else torch's GEMMs, oneDNN's).
torch::Tensor prefill_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                double scale, int64_t block, int64_t grain, bool tiles) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 3 && keys.sizes() == values.sizes() && q.size(2) == keys.size(2),
              "prefill_attention: q [n, heads, d], keys and values [kv_heads, context, d]");
  TORCH_CHECK(q.size(1) % keys.size(0) == 0 && keys.size(1) >= q.size(0) && block >= 1 && grain >= 1,
              "prefill_attention: shapes");
  TORCH_CHECK(q.scalar_type() == keys.scalar_type() && q.scalar_type() == values.scalar_type() &&
              (q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16),
              "prefill_attention: q, keys and values all float32 or all bfloat16");
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2), context = keys.size(1), first = context - n;
  const int64_t kv_heads = keys.size(0), group = heads / kv_heads, blocks = (n + block - 1) / block;
  const auto k = padded(keys, 1, round_up(context, grain));
  const auto v = padded(values, 1, round_up(context, grain));
  // [kv_heads, n, group, d]: a block's queries of one KV group are one contiguous GEMM operand, and
  // its output rows one contiguous destination (no copy per block, one each way per call)
  const int64_t last = (blocks - 1) * block, padded_n = last + round_up(n - last, grain);  // the last block's rows padded
  const auto grouped_q = padded(q.view({n, kv_heads, group, dim}).permute({1, 0, 2, 3}), 1, padded_n);
  auto grouped_out = at::empty({kv_heads, padded_n, group, dim}, q.options());
  const bool tiled = tiles && q.scalar_type() == at::kFloat && dim % W == 0 && grain % W == 0;
  const auto kt = tiled ? k.transpose(1, 2).contiguous() : torch::Tensor();
  const at::ThreadLocalState caller;  // inference mode and the like, for the tasks' own torch calls
  at::parallel_for(0, kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    const at::ThreadLocalStateGuard same_state(caller);
    std::vector<float> row;
    // one score buffer per thread, sized for the largest block (reused by every task it runs)
    auto scratch = at::empty({group * round_up(std::min(block, n), grain) * round_up(context, grain)}, q.options());
    for (int64_t task = begin; task < end; ++task) {
      // blocks taken alternately from both ends: a thread's contiguous range of tasks holds as many
      // late (long) blocks as early (short) ones
      const int64_t h = task % kv_heads, t = task / kv_heads;
      const int64_t b = t % 2 == 0 ? t / 2 : blocks - 1 - t / 2;
      const int64_t start = b * block, rows = std::min(block, n - start);
      if (tiled) {
        attend_block_tiled(grouped_q, kt, v, grouped_out, h, start, rows, first, scale, grain, scratch, row);
      } else if (q.scalar_type() == at::kBFloat16) {
        attend_block<c10::BFloat16>(grouped_q, k, v, grouped_out, h, start, rows, first, scale, grain, scratch, row);
      } else {
        attend_block<float>(grouped_q, k, v, grouped_out, h, start, rows, first, scale, grain, scratch, row);
      }
    }
  });
  return grouped_out.narrow(1, 0, n).permute({1, 0, 2, 3}).reshape({n, heads, dim});
}

void register_prefill_attention(pybind11::module& m) {
  m.def("prefill_attention", &prefill_attention, "causal prefill attention as GEMMs over blocks of query rows");
}
