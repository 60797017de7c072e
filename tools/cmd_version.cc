// `kvferry version`: prints the version.
#include <cstdio>

#include "tools/command_registry.h"

namespace {

void AddVersion(CLI::App& app) {
  auto* sub = app.add_subcommand("version", "Print the kvferry version");
  sub->callback([] { std::printf("kvferry 0.1.0\n"); });
}
KVF_REGISTER_COMMAND(AddVersion);

}  // namespace
