// Compiled by check_compile.cmake with exactly one KVF_CASE_<name> defined. KVF_CASE_control
// must compile; every other case must not (tests/compile_fail/CMakeLists.txt).
#include <span>
#include <vector>

#include "connector/transfer_plan.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/relayout.h"

namespace kv = kvferry::kv;

int main() {
  const kv::BlockGeometry geometry = *kv::BlockGeometry::Create(128, 64);
  const kv::LogicalBlockId logical(3);
  const kv::KernelBlockId kernel(6);
  const std::vector<kv::LogicalBlockId> logical_table{logical};
  const std::vector<kv::KernelBlockId> kernel_table = geometry.ExpandBlockTable(logical_table);
  kv::KvSourceView source;
  kv::CacheSpec spec;
  int result = 0;

#if defined(KVF_CASE_control)
  result += geometry.LogicalBlockOwning(kernel).value();
  result += geometry.KernelBlocksOf(logical).size();
  kv::KernelBlockId k(3);
  result += k.value();
  source.block_table = kernel_table;
  result += (kernel == kv::KernelBlockId(6));
  result += static_cast<int>(spec.KernelBlockBytes(kernel, 2).offset);
  result += static_cast<int>(spec.ElementOffset(kernel, 0, 0));
  const kvferry::connector::internal::KernelRun run{kernel, kernel, 1};
  result += run.count;
#elif defined(KVF_CASE_logical_as_kernel)
  result += geometry.LogicalBlockOwning(logical).value();
#elif defined(KVF_CASE_kernel_as_logical)
  result += geometry.KernelBlocksOf(kernel).size();
#elif defined(KVF_CASE_int_as_kernel)
  result += geometry.LogicalBlockOwning(6).value();
#elif defined(KVF_CASE_int_to_kernel_implicit)
  kv::KernelBlockId k = 3;
  result += k.value();
#elif defined(KVF_CASE_logical_table_as_kernel_table)
  source.block_table = logical_table;
#elif defined(KVF_CASE_compare_logical_kernel)
  result += (logical == kernel);
#elif defined(KVF_CASE_logical_byte_offset)
  result += static_cast<int>(spec.KernelBlockBytes(logical, 2).offset);
#elif defined(KVF_CASE_logical_element_offset)
  result += static_cast<int>(spec.ElementOffset(logical, 0, 0));
#elif defined(KVF_CASE_logical_in_kernel_run)
  const kvferry::connector::internal::KernelRun run{logical, kernel, 1};
  result += run.count;
#else
#error "define one KVF_CASE_<name>"
#endif
  (void)kernel_table;
  (void)source;
  (void)spec;
  return result;
}
