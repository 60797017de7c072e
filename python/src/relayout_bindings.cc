// kvferry.CacheSpec and kvferry.relayout_tokens: the byte geometry of a KV cache (kv/cache_spec.h)
// and the one re-layout between two of them (kv/relayout.h), so Python callers (kvferry.vllm's
// worker, when P and D block sizes differ) copy tokens with the C++ code kvferry's own connector
// uses, not a second implementation. Standard attention only (NHD, HND, VLLM_CPU,
// VLLM_CPU_AMX).
#include "relayout_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kvferry/kv/cache_spec.h"
#include "kvferry/kv/relayout.h"
#include "status_error.h"

namespace nb = nanobind;

namespace kvferry::python {
namespace {

using kv::CacheSpec;
using kv::KernelBlockId;

CacheSpec MakeSpec(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                   const std::string& dtype, const std::string& layout, int32_t block_size_kernel,
                   int32_t num_blocks_kernel) {
  CacheSpec s;
  s.num_layers = num_layers;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.dtype = ValueOrThrow(kv::ParseDType(dtype));
  s.layout = ValueOrThrow(kv::ParseLayout(layout));
  s.block_size_kernel = block_size_kernel;
  s.num_blocks_kernel = num_blocks_kernel;
  ThrowIfError(s.Validate());
  return s;
}

// Region base addresses from Python ints; 0 is refused here (the C++ side takes a pointer as
// given).
template <typename Byte>
std::vector<Byte*> Regions(const std::vector<uintptr_t>& addresses, const char* side) {
  std::vector<Byte*> out;
  for (uintptr_t a : addresses) {
    if (a == 0) {
      throw StatusError(InvalidArgumentError(std::string(side) + " region address is 0"));
    }
    out.push_back(reinterpret_cast<Byte*>(a));
  }
  return out;
}

void Relayout(const CacheSpec& src, const std::vector<uintptr_t>& src_regions,
              const std::vector<KernelBlockId>& src_blocks, const CacheSpec& dst,
              const std::vector<uintptr_t>& dst_regions,
              const std::vector<KernelBlockId>& dst_blocks, int64_t token_begin, int64_t token_end,
              std::optional<std::tuple<int32_t, int32_t, int32_t>> heads) {
  const kv::KvSourceView from{src, Regions<const std::byte>(src_regions, "source"), src_blocks};
  const kv::KvDestView to{dst, Regions<std::byte>(dst_regions, "destination"), dst_blocks};
  kv::HeadRange range;
  if (heads) std::tie(range.src_first, range.dst_first, range.count) = *heads;
  Status s;
  {
    nb::gil_scoped_release release;
    s = kv::RelayoutTokens(from, to, token_begin, token_end, range);
  }
  ThrowIfError(s);
}

std::string Repr(const CacheSpec& s) {
  return "CacheSpec(num_layers=" + std::to_string(s.num_layers) +
         ", num_kv_heads=" + std::to_string(s.num_kv_heads) +
         ", head_dim=" + std::to_string(s.head_dim) + ", dtype='" +
         std::string(kv::DTypeName(s.dtype)) + "', layout='" +
         std::string(kv::LayoutName(s.layout)) +
         "', block_size_kernel=" + std::to_string(s.block_size_kernel) +
         ", num_blocks_kernel=" + std::to_string(s.num_blocks_kernel) + ")";
}

}  // namespace

void RegisterRelayout(nb::module_& m) {
  nb::class_<CacheSpec>(m, "CacheSpec",
                        "The byte geometry of a KV cache (standard attention): one region per "
                        "layer and part (NHD, HND) or per layer (VLLM_CPU, VLLM_CPU_AMX: per "
                        "block and head, the K tile, then the V tile, as vLLM's vec or AMX "
                        "attention packs them).")
      .def(
          "__init__",
          [](CacheSpec* self, int32_t layers, int32_t heads, int32_t head_dim,
             const std::string& dtype, const std::string& layout, int32_t block_size_kernel,
             int32_t num_blocks_kernel) {
            new (self) CacheSpec(MakeSpec(layers, heads, head_dim, dtype, layout, block_size_kernel,
                                          num_blocks_kernel));
          },
          nb::arg("num_layers"), nb::arg("num_kv_heads"), nb::arg("head_dim"), nb::arg("dtype"),
          nb::arg("layout"), nb::arg("block_size_kernel"), nb::arg("num_blocks_kernel"),
          "dtype: 'f32' | 'f16' | 'bf16'; layout: 'NHD' | 'HND' | 'VLLM_CPU' | 'VLLM_CPU_AMX'. "
          "ValueError naming the field when one is unknown, zero or negative.")
      .def_ro("num_layers", &CacheSpec::num_layers)
      .def_ro("num_kv_heads", &CacheSpec::num_kv_heads)
      .def_ro("head_dim", &CacheSpec::head_dim)
      .def_ro("block_size_kernel", &CacheSpec::block_size_kernel)
      .def_ro("num_blocks_kernel", &CacheSpec::num_blocks_kernel)
      .def_prop_ro("dtype", [](const CacheSpec& s) { return std::string(kv::DTypeName(s.dtype)); })
      .def_prop_ro("layout",
                   [](const CacheSpec& s) { return std::string(kv::LayoutName(s.layout)); })
      .def_prop_ro("num_regions", &CacheSpec::num_regions)
      .def_prop_ro("bytes_per_kernel_block", &CacheSpec::bytes_per_kernel_block)
      .def_prop_ro("region_bytes", &CacheSpec::region_bytes, "Bytes of each region.")
      .def("__repr__", &Repr);
  m.def("relayout_tokens", &Relayout, nb::arg("src"), nb::arg("src_regions"), nb::arg("src_blocks"),
        nb::arg("dst"), nb::arg("dst_regions"), nb::arg("dst_blocks"), nb::arg("token_begin"),
        nb::arg("token_end"), nb::arg("heads") = nb::none(),
        "Copies tokens [token_begin, token_end) of one sequence from the cache `src` describes to "
        "the one `dst` describes, bit for bit, whatever their layouts and kernel block sizes. "
        "*_regions: the base address of each region (num_regions of them, region_bytes each; "
        "the caller keeps that memory alive and writable); *_blocks: the sequence's kernel "
        "blocks in that cache, in token order (token t is in blocks[t // block_size_kernel]). "
        "heads: (src_first, dst_first, count) to copy a range of heads. Everything is checked "
        "before a byte is written: incompatible specs are InvalidArgumentError, a short block "
        "table or a block outside its cache OutOfRangeError. The GIL is released while copying.");
}

}  // namespace kvferry::python
