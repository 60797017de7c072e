// The kvferry CLI's subcommand registry. Each tools/cmd_*.cc file registers its subcommands
// with a static KVF_REGISTER_COMMAND(...) and is compiled straight into the executable, so the
// CLI grows by adding a file (tools/CMakeLists.txt picks them up).
//
//   static void AddGenerate(CLI::App& app) {
//     auto* sub = app.add_subcommand("generate", "Generate a completion");
//     ... sub->callback([opts] { throw CLI::RuntimeError(RunGenerate(*opts)); });
//   }
//   KVF_REGISTER_COMMAND(AddGenerate);
//
// A subcommand reports its exit code by throwing CLI::RuntimeError(code) from its callback
// (0 included), which main() turns into the process exit code.
//
// Thread-safety: registration happens during static initialisation, before main().
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace kvferry::tools {

using CommandAdder = std::function<void(CLI::App&)>;

std::vector<CommandAdder>& CommandRegistry();

struct CommandRegistrar {
  explicit CommandRegistrar(CommandAdder adder) { CommandRegistry().push_back(std::move(adder)); }
};

// The `bench` group the cmd_bench_*.cc files add their subcommands to: made by whichever of
// them registers first (registration order across files is unspecified).
inline CLI::App* BenchGroup(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == "bench") return sub;
  }
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  return bench;
}

}  // namespace kvferry::tools

#define KVF_REGISTER_COMMAND(fn) \
  static ::kvferry::tools::CommandRegistrar KVF_CONCAT_(kvf_registrar_, __LINE__)(fn)
#ifndef KVF_CONCAT_
#define KVF_CONCAT_INNER_(a, b) a##b
#define KVF_CONCAT_(a, b) KVF_CONCAT_INNER_(a, b)
#endif
