// `kvferry version`: prints the version (the CMake project's, which the packages carry too).
#include <cstdio>

#include "tools/command_registry.h"

namespace {

void AddVersion(CLI::App& app) {
  auto* sub = app.add_subcommand("version", "Print the kvferry version");
  sub->callback([] { std::printf("kvferry %s\n", KVFERRY_VERSION); });
}
KVF_REGISTER_COMMAND(AddVersion);

}  // namespace
