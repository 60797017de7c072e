// `kvferry bench xfer`: the transfer benchmark (bench/transfer/xfer_bench.h).
#include <cstdint>
#include <sstream>

#include "bench/transfer/xfer_bench.h"
#include "tools/command_registry.h"

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

uint64_t ParseBytes(const std::string& s) {
  uint64_t v = std::stoull(s);
  char unit = s.empty() ? ' ' : s.back();
  if (unit == 'K' || unit == 'k') v <<= 10;
  if (unit == 'M' || unit == 'm') v <<= 20;
  if (unit == 'G' || unit == 'g') v <<= 30;
  return v;
}

void AddBenchXfer(CLI::App& app) {
  struct Flags {
    std::string sizes = "4K,16K,64K,256K,1M,4M";
    std::string batches = "1,16,64,256,1024";
    std::string ops = "read,write";
    std::string transports = "tcp,shm,socket";
    uint64_t working_set_mib = 256;
    bool quick = false;
    kvferry::bench::XferBenchOptions o;
  };
  auto f = std::make_shared<Flags>();
  auto* sub = kvferry::tools::BenchGroup(app)->add_subcommand(
      "xfer", "Transfer-layer benchmark (initiator + target process) with its ceilings");
  sub->add_option("--sizes", f->sizes, "descriptor sizes, e.g. 4K,64K,1M");
  sub->add_option("--batches", f->batches, "descriptors per transfer, e.g. 1,16,1024");
  sub->add_option("--ops", f->ops, "read,write");
  sub->add_option("--transports", f->transports, "tcp,shm (UCX), socket (the socket backend, TCP)");
  sub->add_option("--working-set-mib", f->working_set_mib, "bytes moved through, per side");
  sub->add_option("--point-ms", f->o.point_ms, "time budget per point");
  sub->add_option("--data-path", f->o.data_path, "auto|rma|am (UCX data path)");
  sub->add_flag("--quick", f->quick, "sizes 64K,1M; batches 1,64; short points");
  sub->add_flag("--validate", f->o.validate, "check the bytes of every point");
  sub->add_flag("--json", f->o.json, "print the whole table as JSON");
  sub->add_option("--busy-threads", f->o.busy_threads,
                  "contention: threads spinning beside the two processes while points run "
                  "(ceilings stay idle)");
  sub->add_option("--plot", f->o.plot_path,
                  "write an SVG of GB/s against descriptor size per transport, with the ceilings");
  sub->add_flag("!--no-ceilings", f->o.ceilings, "skip memcpy / iperf3 / ucx_perftest");
  sub->add_option("--connect", f->o.connect, "HOST:PORT of a target started with --listen");
  sub->add_option("--listen", f->o.listen, "target role: [HOST:]PORT to accept the initiator on");
  sub->add_option("--role", f->o.role, "initiator|target")->group("");
  sub->add_option("--ctl-fd", f->o.ctl_fd)->group("");
  sub->add_option("--transport", f->o.transport, "target role: tcp|shm|socket");
  sub->callback([f] {
    if (f->quick) {
      f->sizes = "64K,1M";
      f->batches = "1,64";
      f->o.point_ms = 250;
    }
    for (auto& s : Split(f->sizes)) f->o.sizes.push_back(ParseBytes(s));
    for (auto& s : Split(f->batches)) f->o.batches.push_back(static_cast<uint32_t>(std::stoul(s)));
    f->o.ops = Split(f->ops);
    f->o.transports = Split(f->transports);
    if (!f->o.listen.empty() && f->o.role == "initiator") f->o.role = "target";
    if (f->o.role == "target" && f->o.transport.empty()) f->o.transport = "tcp";
    f->o.working_set_bytes = f->working_set_mib << 20;
    throw CLI::RuntimeError(kvferry::bench::RunXferBench(f->o));
  });
}
KVF_REGISTER_COMMAND(AddBenchXfer);

}  // namespace
