// kvferry.LogicalBlockId, kvferry.KernelBlockId and kvferry.BlockGeometry: the KV cache's two id
// spaces as two Python types with no conversion between them, and the one mapping from logical
// to kernel ids (kv/block_geometry.h). A KernelBlockId (or a plain int) passed where a
// LogicalBlockId is expected raises TypeError, as the C++ types refuse to compile. And
// kvferry.HeadSharding: which KV heads each tensor-parallel rank holds (kv/head_sharding.h), so
// that Python asks the C++ rule rather than repeating it.
#include "block_bindings.h"

#include <nanobind/nanobind.h>
#include <nanobind/operators.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "kvferry/kv/block_geometry.h"
#include "kvferry/kv/block_id.h"
#include "kvferry/kv/head_sharding.h"
#include "status_error.h"

namespace nb = nanobind;

namespace kvferry::python {
namespace {

using kv::BlockGeometry;
using kv::HeadSharding;
using kv::KernelBlockId;
using kv::LogicalBlockId;

// The C++ mapping aborts on a negative id (a programming error there); Python gets ValueError.
void CheckNonNegative(int32_t value, const char* what) {
  if (value < 0) {
    throw StatusError(
        InvalidArgumentError(std::string(what) + " " + std::to_string(value) + " is negative"));
  }
}

template <typename Id>
void BindId(nb::module_& m, const char* name, const char* doc) {
  nb::class_<Id>(m, name, doc)
      .def(nb::init<int32_t>(), nb::arg("value"))
      .def_prop_ro("value", &Id::value)
      .def(nb::self == nb::self)
      .def(nb::self != nb::self)
      .def(nb::self < nb::self)
      .def(nb::self <= nb::self)
      .def(nb::self > nb::self)
      .def(nb::self >= nb::self)
      .def("__hash__", [](Id id) { return std::hash<int32_t>()(id.value()); })
      .def("__int__", &Id::value)
      .def("__repr__",
           [name](Id id) { return std::string(name) + "(" + std::to_string(id.value()) + ")"; });
}

std::vector<KernelBlockId> KernelBlocksOf(const BlockGeometry& g, LogicalBlockId logical) {
  CheckNonNegative(logical.value(), "LogicalBlockId");
  std::vector<KernelBlockId> out;
  for (KernelBlockId k : g.KernelBlocksOf(logical)) out.push_back(k);
  return out;
}

std::vector<KernelBlockId> Expand(const BlockGeometry& g,
                                  const std::vector<LogicalBlockId>& logical) {
  for (LogicalBlockId l : logical) CheckNonNegative(l.value(), "LogicalBlockId");
  return g.ExpandBlockTable(logical);
}

LogicalBlockId Owning(const BlockGeometry& g, KernelBlockId kernel) {
  CheckNonNegative(kernel.value(), "KernelBlockId");
  return g.LogicalBlockOwning(kernel);
}

void CheckRank(const HeadSharding& h, int32_t rank) {
  if (rank < 0 || rank >= h.tp_size()) {
    throw StatusError(OutOfRangeError("rank " + std::to_string(rank) + " outside [0, " +
                                      std::to_string(h.tp_size()) + ")"));
  }
}

void BindHeadSharding(nb::module_& m) {
  nb::class_<HeadSharding>(m, "HeadSharding",
                           "The KV heads of each tensor-parallel rank: contiguous shares when "
                           "tp_size divides num_kv_heads, whole heads replicated when "
                           "num_kv_heads divides tp_size; any other pair raises "
                           "InvalidArgumentError naming both.")
      .def(
          "__init__",
          [](HeadSharding* self, int32_t num_kv_heads, int32_t tp_size) {
            new (self) HeadSharding(ValueOrThrow(HeadSharding::Create(num_kv_heads, tp_size)));
          },
          nb::arg("num_kv_heads"), nb::arg("tp_size"))
      .def_prop_ro("num_kv_heads", &HeadSharding::num_kv_heads)
      .def_prop_ro("tp_size", &HeadSharding::tp_size)
      .def_prop_ro("heads_per_rank", &HeadSharding::HeadsPerRank)
      .def_prop_ro("num_copies", &HeadSharding::NumCopies,
                   "How many ranks hold each head (1 unless replicated).")
      .def(
          "first_head",
          [](const HeadSharding& h, int32_t rank) {
            CheckRank(h, rank);
            return h.FirstHead(rank);
          },
          nb::arg("rank"), "The first KV head `rank` holds.")
      .def(nb::self == nb::self)
      .def("__repr__", [](const HeadSharding& h) {
        return "HeadSharding(num_kv_heads=" + std::to_string(h.num_kv_heads()) +
               ", tp_size=" + std::to_string(h.tp_size()) + ")";
      });
}

}  // namespace

void RegisterBlocks(nb::module_& m) {
  BindId<LogicalBlockId>(m, "LogicalBlockId",
                         "A block of block_size_logical tokens: the scheduler's unit, the unit "
                         "of kv_transfer_params and of failure reports.");
  BindId<KernelBlockId>(m, "KernelBlockId",
                        "A block of block_size_kernel tokens: a page of the KV tensor, the unit "
                        "of descriptors and copies.");
  nb::class_<BlockGeometry>(m, "BlockGeometry",
                            "The one mapping from logical to kernel block ids: logical block l "
                            "owns kernel blocks l*R .. l*R+R-1, R = logical / kernel size.")
      .def(
          "__init__",
          [](BlockGeometry* self, int32_t logical, int32_t kernel) {
            new (self) BlockGeometry(ValueOrThrow(BlockGeometry::Create(logical, kernel)));
          },
          nb::arg("block_size_logical"), nb::arg("block_size_kernel"))
      .def_prop_ro("block_size_logical", &BlockGeometry::block_size_logical)
      .def_prop_ro("block_size_kernel", &BlockGeometry::block_size_kernel)
      .def_prop_ro("kernel_blocks_per_logical", &BlockGeometry::kernel_blocks_per_logical)
      .def("kernel_blocks_of", &KernelBlocksOf, nb::arg("logical"),
           "The kernel blocks of one logical block, in order.")
      .def("expand_block_table", &Expand, nb::arg("logical"),
           "A logical block table as kernel blocks (R per logical block, order kept).")
      .def("logical_block_owning", &Owning, nb::arg("kernel"),
           "The logical block a kernel block belongs to.")
      .def("logical_blocks_for", &BlockGeometry::LogicalBlocksFor, nb::arg("num_tokens"))
      .def("kernel_blocks_for", &BlockGeometry::KernelBlocksFor, nb::arg("num_tokens"))
      .def(nb::self == nb::self)
      .def("__repr__", [](const BlockGeometry& g) {
        return "BlockGeometry(block_size_logical=" + std::to_string(g.block_size_logical()) +
               ", block_size_kernel=" + std::to_string(g.block_size_kernel()) + ")";
      });
  BindHeadSharding(m);
}

}  // namespace kvferry::python
