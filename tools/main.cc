// kvferry: the command-line front of the library. Subcommands live in tools/cmd_*.cc.
#include <CLI/CLI.hpp>

#include "kvferry/common/logging.h"
#include "tools/command_registry.h"

namespace kvferry::tools {

std::vector<CommandAdder>& CommandRegistry() {
  static std::vector<CommandAdder> registry;
  return registry;
}

}  // namespace kvferry::tools

int main(int argc, char** argv) {
  CLI::App app{"kvferry: prefill/decode-disaggregated LLM serving"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (env KVFERRY_LOG)");
  app.parse_complete_callback([&] {
    if (!log_level.empty()) kvferry::SetLogLevel(log_level);
  });
  for (auto& add : kvferry::tools::CommandRegistry()) add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
