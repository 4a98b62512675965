// Reproducible random inputs for the kernel and backend tests: the same seed gives the same
// values on every machine (std::mt19937 and std::normal_distribution as libstdc++ has them).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace qrun::test {

// n values drawn from N(0, scale^2).
inline std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// random_vector(n, seed) with every 97th value from the sixth on 20 times larger: the
// outliers real activations have, so that quantized blocks' scales differ widely.
inline std::vector<float> random_activations(int64_t n, uint32_t seed) {
  std::vector<float> v = random_vector(n, seed);
  for (size_t i = 5; i < v.size(); i += 97) v[i] *= 20.0f;
  return v;
}

}  // namespace qrun::test
