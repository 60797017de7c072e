// The geometry matrix (docs/architecture.md, "What counts as proof"; docs/connector.md §8): P and D
// engines with real FerryConnectors over loopback, for pairs of instance specs — logical block {16,
// 64, 128, 256} x backend flash (kernel 16/32/64) / paged (any multiple of 16) x NHD/HND x host
// buffer on/off — over a prompt shorter than one block and one spanning many. D's output must equal
// colocated output bit for bit and both pools must end clean.
//
// The default run takes a sample in which every spec is P twice and D twice (64 pairs);
// KVFERRY_PD_FULL_MATRIX=1 (ctest: connector_pd_matrix_full, label long) runs all 32 x 32.
#include <gtest/gtest.h>

#include <cstdlib>

#include "pd_harness.h"

namespace kvferry::pd_test {
namespace {

using kv::Layout;

std::vector<InstanceSpec> AllSpecs() {
  std::vector<InstanceSpec> out;
  for (int32_t bs : {16, 64, 128, 256})
    for (const char* backend : {"flash", "paged"})
      for (Layout layout : {Layout::kNHD, Layout::kHND})
        for (bool host : {false, true}) out.push_back({bs, backend, layout, host});
  return out;
}

TEST(PdMatrixTest, GeometryMatrix) {
  const std::vector<std::vector<int32_t>> prompts = {MakePrompt(5, 1), MakePrompt(600, 2)};
  std::vector<Completion> reference;
  for (const auto& prompt : prompts) reference.push_back(Colocated(prompt, Greedy(4)));
  const std::vector<InstanceSpec> specs = AllSpecs();
  const size_t n = specs.size();
  const bool full = std::getenv("KVFERRY_PD_FULL_MATRIX") != nullptr;
  for (size_t i = 0; i < n; ++i) {
    std::vector<size_t> partners = {(i * 7 + 3) % n, (i * 13 + 10) % n};
    if (full) {
      partners.clear();
      for (size_t j = 0; j < n; ++j) partners.push_back(j);
    }
    for (size_t j : partners) {
      RunPair({specs[i], specs[j]}, prompts, reference, Greedy(4));
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace kvferry::pd_test
