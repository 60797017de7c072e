// kvferry.LeaseTable: the connector's lease table (kvferry/connector/lease_table.h) for Python —
// P's held blocks and the per-block generation array a D re-reads after its data READ. The
// table owns the array (one copy, 8-byte aligned, starting at generation 1); a P registers it
// with its agent through `generations_address` / `generations_nbytes` and keeps the table alive
// for as long as the registration. Block ids are kvferry.LogicalBlockId: a KernelBlockId or a
// plain int raises TypeError.
#include "lease_bindings.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvferry/common/deadline.h"
#include "kvferry/connector/lease_table.h"
#include "kvferry/kv/block_id.h"
#include "status_error.h"

namespace nb = nanobind;

namespace kvferry::python {
namespace {

using connector::LeaseTable;
using kv::LogicalBlockId;

// A lease of `lease_s` seconds from now; None: one that never runs out (it ends by end()).
Deadline ExpiryOf(std::optional<double> lease_s) {
  if (!lease_s) return Deadline::At(Deadline::Clock::time_point::max());
  if (!(*lease_s >= 0)) {
    throw StatusError(InvalidArgumentError("lease_s must be >= 0 (or None: no expiry)"));
  }
  // Capped at ~31 years, so that the milliseconds fit an int64 (and the clock's range).
  return Deadline::AfterMs(static_cast<int64_t>(std::min(*lease_s, 1e9) * 1000.0));
}

std::vector<uint64_t> Grant(LeaseTable& t, const std::string& request_id,
                            const std::vector<LogicalBlockId>& ids, std::optional<double> lease_s) {
  return ValueOrThrow(t.Grant(request_id, ids, ExpiryOf(lease_s)));
}

bool End(LeaseTable& t, const std::string& request_id) {
  const Status st = t.End(request_id);
  if (st.code() == StatusCode::kNotFound) return false;
  ThrowIfError(st);
  return true;
}

uint64_t GenerationOf(const LeaseTable& t, LogicalBlockId id) {
  if (id.value() < 0 || id.value() >= t.num_blocks_logical()) {
    throw StatusError(OutOfRangeError("block " + std::to_string(id.value()) + " outside [0, " +
                                      std::to_string(t.num_blocks_logical()) + ")"));
  }
  return t.Generation(id);
}

void Init(LeaseTable* t, int32_t num_blocks) {
  if (num_blocks <= 0) {
    throw StatusError(
        InvalidArgumentError("num_blocks must be > 0, got " + std::to_string(num_blocks)));
  }
  new (t) LeaseTable(num_blocks);
}

}  // namespace

void RegisterLeases(nb::module_& m) {
  nb::class_<LeaseTable>(
      m, "LeaseTable",
      "P's leases on logical blocks and their generations: grant() records a hold and returns "
      "the blocks' generations; end() bumps every block no other lease holds. A D that reads a "
      "block's generation after its data and finds it unchanged read blocks nobody reused.")
      .def("__init__", &Init, nb::arg("num_blocks"))
      .def_prop_ro("num_blocks", &LeaseTable::num_blocks_logical)
      .def_prop_ro(
          "generations_address",
          [](LeaseTable& t) { return reinterpret_cast<uintptr_t>(t.generations_data()); },
          "Address of the uint64 generation array (little endian, one per block).")
      .def_prop_ro("generations_nbytes", &LeaseTable::generations_size_bytes)
      .def("grant", &Grant, nb::arg("request_id"), nb::arg("block_ids"),
           nb::arg("lease_s").none() = nb::none(),
           "Holds the blocks for request_id; their generations, in order. AlreadyExistsError "
           "while request_id holds a lease; OutOfRangeError for a block outside the table.")
      .def("end", &End, nb::arg("request_id"),
           "Ends request_id's lease (bumping what no other lease holds); False if it had none.")
      .def("end_expired", &LeaseTable::EndExpired,
           "Ends every lease whose lease_s ran out; their request ids.")
      .def("has", &LeaseTable::Has, nb::arg("request_id"))
      .def("generation", &GenerationOf, nb::arg("block_id"))
      .def_prop_ro("blocks_held", &LeaseTable::blocks_held)
      .def_prop_ro("leases", &LeaseTable::leases);
}

}  // namespace kvferry::python
