// kvferry: the command-line front of the library. Subcommands live in tools/cmd_*.cc.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kvferry/common/logging.h"
#include "tools/command_registry.h"

namespace kvferry::tools {

std::vector<CommandAdder>& CommandRegistry() {
  static std::vector<CommandAdder> registry;
  return registry;
}

}  // namespace kvferry::tools

namespace {

// vLLM spells --tensor-parallel-size "-tp", a multi-letter single-dash name CLI11 does not
// accept: rewrite "-tp N" and "-tp=N" before parsing.
std::vector<std::string> VllmSpellings(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a == "-tp") a = "--tensor-parallel-size";
    if (a.rfind("-tp=", 0) == 0) a = "--tensor-parallel-size=" + a.substr(4);
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvferry: prefill/decode-disaggregated LLM serving"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (env KVFERRY_LOG)");
  app.parse_complete_callback([&] {
    if (!log_level.empty()) kvferry::SetLogLevel(log_level);
  });
  for (auto& add : kvferry::tools::CommandRegistry()) add(app);
  std::vector<std::string> args = VllmSpellings(argc, argv);
  std::vector<char*> argv2;
  for (std::string& a : args) argv2.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv2.size()), argv2.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
