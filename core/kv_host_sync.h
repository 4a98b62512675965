// A backend may keep the KV cache in memory of its own (Backend::kv_to_host): these bring a
// whole cache's rows to the host before code reads them there (saving a prompt cache), and
// give them back after code wrote them there (loading one, shifting the context).
#pragma once

#include "core/kv_cache.h"
#include "ggml-like/backend.h"

namespace qrun {

inline void sync_kv_to_host(Backend& backend, KvCache& kv) {
  for (int64_t il = 0; il < kv.n_layer(); ++il) backend.kv_to_host(kv.layer(il));
}

inline void sync_kv_from_host(Backend& backend, KvCache& kv) {
  for (int64_t il = 0; il < kv.n_layer(); ++il) backend.kv_from_host(kv.layer(il));
}

}  // namespace qrun
