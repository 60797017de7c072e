// Example: embedding the P/D connector with its side channel under CURVE. Writes key pairs the
// way `kvferry keygen` does, lists P's public key for this D, parses a --kv-transfer-config
// naming the key files, and creates the connector (loopback transfer backend: no network).
// An engine would then hand conn->scheduler() and conn->worker() to its scheduler and model
// runner (docs/connector.md §1).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "kvferry/connector/curve_keys.h"
#include "kvferry/connector/ferry_connector.h"
#include "kvferry/connector/kv_transfer_config.h"

using namespace kvferry;
using namespace kvferry::connector;

static int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

int main() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvferry-example-XXXXXX").string();
  const std::string dir = ::mkdtemp(tmpl.data());

  // Each instance has its own pair; only public keys are exchanged.
  for (const char* name : {"p0", "d0"}) {
    auto pair = GenerateCurveKeyPair();
    if (!pair.ok()) return Fail(pair.status());
    const std::string base = dir + "/" + name;
    Status written = WriteCurveKeyPair(*pair, base + ".key", base + ".pub");
    if (!written.ok()) return Fail(written);
  }
  auto p0 = ReadCurveKeyListFile(dir + "/p0.pub");
  if (!p0.ok()) return Fail(p0.status());
  std::ofstream(dir + "/servers") << "p0 " << (*p0)[0].key << "\n";  // which key is P p0's

  auto config = ParseKvTransferConfig(R"({"kv_connector": "FerryConnector",
      "kv_role": "kv_consumer", "engine_id": "d0",
      "kv_connector_extra_config": {"backend": "loopback",
        "curve_secret_key_file": ")" + dir +
                                      R"(/d0.key",
        "curve_server_keys_file": ")" +
                                      dir + R"(/servers"}})");
  if (!config.ok()) return Fail(config.status());
  auto conn = CreateFerryConnector(*config, {.model_name = "tiny"});
  if (!conn.ok()) return Fail(conn.status());
  std::printf("connector %s: side channel %s, %llu transfers so far\n",
              (*conn)->engine_id().c_str(), (*conn)->config().use_curve() ? "CURVE" : "plaintext",
              static_cast<unsigned long long>((*conn)->Stats().transfers));
  conn->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
