// libFuzzer target: connector::ParseKvTransferParams (include/kvferry/connector/
// kv_transfer_params.h) over arbitrary JSON text.
//
// Properties: no crash or sanitizer report; a successful parse round-trips through ToJson
// (ToJson(p) parses back to p).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "kvferry/connector/kv_transfer_params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, /*cb=*/nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto parsed = kvferry::connector::ParseKvTransferParams(j);
  if (parsed.ok()) {
    auto again = kvferry::connector::ParseKvTransferParams(kvferry::connector::ToJson(*parsed));
    if (!again.ok() || !(*again == *parsed)) std::abort();
  }
  return 0;
}
