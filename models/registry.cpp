// The architecture table. Each architecture file adds one row.
#include "models/registry.h"

namespace qrun::models {

std::vector<std::string_view> architecture_names() { return {}; }

}  // namespace qrun::models
