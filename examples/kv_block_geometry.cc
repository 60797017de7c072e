// Example: the seed's configuration. A user asks for --block-size 128 on the `flash` backend,
// whose kernels support pages of 16/32/64 tokens: the KV tensor is laid out in 64-token kernel
// blocks, and logical block l owns kernel blocks 2l and 2l+1.
#include <cstdio>

#include "kvferry/kv/attention_backend.h"
#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/cache_spec.h"

using namespace kvferry;

int main() {
  auto backend = kv::FindAttentionBackend("flash");
  if (!backend.ok()) return std::fprintf(stderr, "%s\n", backend.status().ToString().c_str()), 1;
  auto kernel = kv::SelectKernelBlockSize(128, **backend);
  if (!kernel.ok()) return std::fprintf(stderr, "%s\n", kernel.status().ToString().c_str()), 1;
  auto geometry = kv::BlockGeometry::Create(128, *kernel);
  if (!geometry.ok()) return std::fprintf(stderr, "%s\n", geometry.status().ToString().c_str()), 1;
  std::printf("logical 128 on flash -> kernel %d, R = %d\n", *kernel,
              geometry->kernel_blocks_per_logical());

  kv::CacheSpec spec{.num_layers = 2,
                     .num_kv_heads = 2,
                     .head_dim = 64,
                     .dtype = kv::DType::kBF16,
                     .layout = kv::Layout::kNHD,
                     .block_size_kernel = *kernel,
                     .num_blocks_kernel = 16};
  if (Status s = spec.Validate(); !s.ok())
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;

  const kv::LogicalBlockId logical(3);
  for (kv::KernelBlockId k : geometry->KernelBlocksOf(logical)) {
    size_t begin = static_cast<size_t>(k.value()) * spec.bytes_per_kernel_block();
    std::printf("logical %d -> kernel %d: bytes [%zu, %zu) of each of %d regions\n",
                logical.value(), k.value(), begin, begin + spec.bytes_per_kernel_block(),
                spec.num_regions());
  }
  return 0;
}
