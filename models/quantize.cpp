// quantize_model: plan every tensor's type, then stream the converted rows into the writer.
#include "models/quantize.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "models/quant_recipe.h"

namespace qrun::models {
namespace {

// Converts `n_rows` rows of `row_len` elements from `src_type` to `dst_type` through F32
// with the reference dequantizers and quantizers (exact where llama-quantize is exact).
void convert_rows(const uint8_t* src, DType src_type, uint8_t* dst, DType dst_type, int64_t row_len,
                  int64_t n_rows, ThreadPool* pool) {
  const size_t src_row = row_size(src_type, row_len);
  const size_t dst_row = row_size(dst_type, row_len);
  const ToFloatFn to_float = type_traits(src_type).to_float;
  const FromFloatFn from_float = type_traits(dst_type).from_float;
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(row_len));
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* s = src + static_cast<size_t>(r) * src_row;
      if (src_type == DType::kF32) {
        std::memcpy(row.data(), s, src_row);
      } else {
        to_float(s, row.data(), row_len);
      }
      from_float(row.data(), dst + static_cast<size_t>(r) * dst_row, row_len);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(n_rows, work, 16);
  } else {
    work(0, n_rows);
  }
}

bool can_convert(DType type) {
  const TypeTraits& t = type_traits(type);
  return is_supported(type) && (type == DType::kF32 || t.to_float != nullptr);
}

}  // namespace

Result<QuantizeStats> quantize_model(const gguf::File& in, const std::string& out_path,
                                     const QuantizeOptions& o) {
  Result<QuantRecipe> recipe = quant_recipe_or_error(o.recipe, "quantize");
  if (!recipe.ok()) return recipe.error();
  if (o.pure) recipe->mix = QuantMix::kNone;

  // The counts some rules depend on.
  int64_t n_attn_v = 0, n_ffn_down = 0;
  bool has_output = false;
  for (const gguf::TensorInfo& t : in.tensors()) {
    if (t.name.find("attn_v.weight") != std::string::npos) ++n_attn_v;
    if (t.name.find("ffn_down") != std::string::npos) ++n_ffn_down;
    if (t.name == "output.weight") has_output = true;
  }
  Result<std::string> arch = in.get_string_or("general.architecture", "");
  if (!arch.ok()) return arch.error();
  Result<int64_t> n_layer = in.get_int_or(*arch + ".block_count", n_ffn_down);
  if (!n_layer.ok()) return n_layer.error();
  // Query heads per KV head; 1 where the counts are not single integers (per-layer arrays).
  Result<int64_t> n_head = in.get_int_or(*arch + ".attention.head_count", 1);
  Result<int64_t> n_head_kv =
      in.get_int_or(*arch + ".attention.head_count_kv", n_head.ok() ? *n_head : 1);
  const int64_t n_gqa = n_head.ok() && n_head_kv.ok() && *n_head_kv > 0
                            ? std::max<int64_t>(1, *n_head / *n_head_kv)
                            : 1;
  QuantPlanner planner(*recipe, n_attn_v, *n_layer, has_output, n_gqa);

  // Plan: the new type of every tensor, in file order.
  std::vector<DType> types;
  types.reserve(in.tensors().size());
  for (const gguf::TensorInfo& t : in.tensors()) {
    DType type = t.type;
    if (is_quantizable_weight(t.name, t.n_dims)) {
      if (type_traits(t.type).is_quantized && !o.allow_requantize) {
        return in.error(ErrorCode::kUsage,
                        format("tensor '%s' is already %s; requantizing loses quality "
                               "(pass --allow-requantize to do it anyway)",
                               t.name.c_str(), dtype_name(t.type)));
      }
      type = o.pure ? fit_type(recipe->base, t.ne[0]) : planner.next(t.name, t.ne[0]);
      if (o.output_type && t.name == "output.weight") type = fit_type(*o.output_type, t.ne[0]);
      if (o.token_embd_type && t.name == "token_embd.weight") {
        type = fit_type(*o.token_embd_type, t.ne[0]);
      }
    }
    if (type != t.type && (!can_convert(t.type) || type_traits(type).from_float == nullptr)) {
      return in.error(ErrorCode::kUnsupported,
                      format("tensor '%s': cannot convert %s to %s", t.name.c_str(),
                             dtype_name(t.type), dtype_name(type)));
    }
    types.push_back(type);
  }

  gguf::Writer w(in.alignment());
  for (const gguf::KeyValue& kv : in.metadata()) {
    if (kv.key.rfind("split.", 0) == 0) continue;  // the output is one file
    w.set(kv.key, kv.value);
  }
  w.set_u32("general.quantization_version", 2);
  if (recipe->file_type >= 0)
    w.set_u32("general.file_type", static_cast<uint32_t>(recipe->file_type));

  QuantizeStats stats;
  stats.n_tensors = in.tensors().size();
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const gguf::TensorInfo& t = in.tensors()[i];
    const DType type = types[i];
    std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    stats.bytes_in += t.n_bytes;
    stats.bytes_out += row_size(type, t.ne[0]) * static_cast<uint64_t>(t.n_elements() / t.ne[0]);
    if (type == t.type) {
      w.add_tensor(t.name, type, shape,
                   [&o, &t, i, type, n = stats.n_tensors](std::span<uint8_t> out) {
                     if (o.on_tensor) o.on_tensor(i, n, t, type);
                     std::memcpy(out.data(), t.data, out.size());
                   });
      continue;
    }
    ++stats.n_converted;
    w.add_tensor(
        t.name, type, shape, [&o, &t, i, type, n = stats.n_tensors](std::span<uint8_t> out) {
          if (o.on_tensor) o.on_tensor(i, n, t, type);
          convert_rows(t.data, t.type, out.data(), type, t.ne[0], t.n_elements() / t.ne[0], o.pool);
        });
  }
  QRUN_TRY(w.write(out_path));
  return stats;
}

}  // namespace qrun::models
