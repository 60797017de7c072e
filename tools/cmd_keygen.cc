// `kvferry keygen`: writes a CURVE key pair for the side channel (docs/deploy.md, "Side-channel
// keys"): NAME.key (the secret, mode 0600) and NAME.pub (the public key) in --dir. Existing
// files are never overwritten.
#include <cstdio>
#include <memory>
#include <string>

#include "kvferry/connector/curve_keys.h"
#include "tools/command_registry.h"

namespace {

struct KeygenOptions {
  std::string dir = ".";
  std::string name = "kvferry";
};

int RunKeygen(const KeygenOptions& o) {
  using namespace kvferry;
  auto pair = connector::GenerateCurveKeyPair();
  if (!pair.ok()) {
    std::fprintf(stderr, "kvferry keygen: %s\n", pair.status().ToString().c_str());
    return 2;
  }
  const std::string base = o.dir + "/" + o.name;
  Status written = connector::WriteCurveKeyPair(*pair, base + ".key", base + ".pub");
  if (!written.ok()) {
    std::fprintf(stderr, "kvferry keygen: %s\n", written.ToString().c_str());
    return 2;
  }
  // The public key only: the secret stays in its file.
  std::printf("%s.key (secret, 0600)\n%s.pub\npublic key: %s\n", base.c_str(), base.c_str(),
              pair->public_key.c_str());
  return 0;
}

void AddKeygen(CLI::App& app) {
  auto o = std::make_shared<KeygenOptions>();
  auto* sub = app.add_subcommand(
      "keygen", "Write a CURVE key pair for the side channel: NAME.key (secret) and NAME.pub");
  sub->add_option("--dir", o->dir, "Directory to write into")->capture_default_str();
  sub->add_option("--name", o->name, "File name without extension (e.g. the engine id)")
      ->capture_default_str();
  sub->callback([o] { throw CLI::RuntimeError(RunKeygen(*o)); });
}
KVF_REGISTER_COMMAND(AddKeygen);

}  // namespace
