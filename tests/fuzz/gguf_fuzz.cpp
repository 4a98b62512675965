// libFuzzer entry point for the GGUF reader: File::from_bytes must accept or reject any
// input without crashing, hanging or allocating without bound. An accepted file is also
// walked (every value rendered, every tensor byte range touched) and rewritten through
// the Writer, and the rewrite must parse back to the same keys and tensors.
#include <cstddef>
#include <cstdint>

#include "core/gguf/gguf.h"

namespace {

using qrun::gguf::File;

void check_rejection(const qrun::Error& e) {
  QRUN_CHECK(e.message.rfind("fuzz.gguf: ", 0) == 0, "message does not name the file: %s",
             e.message.c_str());
  QRUN_CHECK(e.message.find('\n') == std::string::npos, "multi-line message: %s",
             e.message.c_str());
  QRUN_CHECK(e.code == qrun::ErrorCode::kFormat || e.code == qrun::ErrorCode::kUnsupported,
             "unexpected code %d", static_cast<int>(e.code));
}

// Reads every byte an accepted file claims, so ASan sees any out-of-bounds view.
unsigned walk(const File& f) {
  unsigned sum = 0;
  for (const qrun::gguf::KeyValue& kv : f.metadata()) {
    sum += static_cast<unsigned>(kv.value.to_display_string().size());
    (void)f.get_int_or(kv.key, 0);
    (void)f.get_string_array(kv.key);
    (void)f.get_float_array(kv.key);
  }
  for (const qrun::gguf::TensorInfo& t : f.tensors()) {
    const qrun::Tensor v = t.view();
    QRUN_CHECK(v.n_bytes() == t.n_bytes, "tensor '%s': view of %zu bytes, info %zu", t.name.c_str(),
               v.n_bytes(), t.n_bytes);
    QRUN_CHECK(t.file_offset + t.n_bytes <= f.file_size(), "tensor '%s' outside the file",
               t.name.c_str());
    for (size_t i = 0; i < t.n_bytes; i += 61) sum += t.data[i];
    sum += t.data[t.n_bytes - 1];
  }
  return sum;
}

void check_rewrite(const File& f) {
  qrun::gguf::Writer w(f.alignment());
  for (const qrun::gguf::KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  for (const qrun::gguf::TensorInfo& t : f.tensors()) {
    std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor(t.name, t.type, shape, std::span<const uint8_t>(t.data, t.n_bytes));
  }
  qrun::Result<File> back = File::from_bytes(w.to_bytes(), "rewrite.gguf");
  QRUN_CHECK(back.ok(), "the rewrite does not parse: %s", back.error().message.c_str());
  QRUN_CHECK(back->metadata().size() == f.metadata().size(), "%zu keys became %zu",
             f.metadata().size(), back->metadata().size());
  QRUN_CHECK(back->tensors().size() == f.tensors().size(), "%zu tensors became %zu",
             f.tensors().size(), back->tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const qrun::gguf::TensorInfo& a = f.tensors()[i];
    const qrun::gguf::TensorInfo& b = back->tensors()[i];
    QRUN_CHECK(a.name == b.name && a.type == b.type && a.ne == b.ne && a.n_bytes == b.n_bytes &&
                   std::equal(a.data, a.data + a.n_bytes, b.data),
               "tensor '%s' changed in the rewrite", a.name.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qrun::Result<File> f = File::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
  if (!f.ok()) {
    check_rejection(f.error());
    return 0;
  }
  volatile unsigned sink = walk(*f);
  (void)sink;
  // A valid file may ask for a huge alignment (up to 2^31); the rewrite pads the header
  // and every tensor to it, so it is skipped when that would take more than 64 MiB.
  if (f->alignment() * (f->tensors().size() + 1) + f->file_size() <= (size_t{64} << 20)) {
    check_rewrite(*f);
  }
  return 0;
}
