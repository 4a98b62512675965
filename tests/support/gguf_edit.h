// Copies of a GGUF file with one metadata key changed, for tests of what a loader makes of
// a bad or missing key.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "ggml-like/result.h"

namespace qrun::test {

// `file` in memory (named "edited.gguf") with metadata key `key` set to `value`, or left out
// when `value` is nullopt; every other key and every tensor as they are.
inline Result<gguf::File> with_key(const gguf::File& file, const std::string& key,
                                   const std::optional<gguf::Value>& value) {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : file.metadata()) {
    if (kv.key != key) w.set(kv.key, kv.value);
  }
  if (value) w.set(key, *value);
  for (const gguf::TensorInfo& t : file.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::span<const uint8_t>(t.data, t.n_bytes));
  }
  return gguf::File::from_bytes(w.to_bytes(), "edited.gguf");
}

}  // namespace qrun::test
