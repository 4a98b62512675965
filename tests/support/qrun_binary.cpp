// qrun_binary() (see test_data.h): in its own file because only builds that have the qrun
// binary (neither QRUN_KERNELS_ONLY nor QRUN_NO_CLI) compile it, with QRUN_BINARY pointing
// at that binary.
#include "tests/support/test_data.h"

namespace qrun::test {

std::filesystem::path qrun_binary() {
  return QRUN_BINARY;
}

}  // namespace qrun::test
