#include "tools/cluster_flags.h"

#include "kvferry/cluster/member.h"
#include "kvferry/cluster/registry_address.h"

namespace kvferry::tools {
namespace {

// A bound tcp://0.0.0.0:PORT (a wildcard bind) as proxies reach it: tcp://HOST:PORT.
std::string ReachableEndpoint(const std::string& bound, const std::string& host) {
  const std::string wildcard = "tcp://0.0.0.0:";
  if (!bound.starts_with(wildcard)) return bound;
  return "tcp://" + host + ":" + bound.substr(wildcard.size());
}

}  // namespace

void AddServeRegistryFlags(CLI::App* serve, ServeRegistryFlags* f) {
  serve->add_option("--registry", f->registry,
                    "Register this instance in a cluster: etcd://HOST:PORT[,HOST:PORT...]"
                    "[/NAMESPACE] (docs/deploy.md); needs --kv-transfer-config");
  serve
      ->add_option("--registry-ttl", f->ttl_s,
                   "Seconds of the registry lease: a crashed or cut-off instance leaves the "
                   "cluster this long after its last keep-alive")
      ->capture_default_str();
  serve
      ->add_option("--cluster-role", f->cluster_role,
                   "The legs proxies route here: prefill, decode or both (default: from "
                   "kv_role). A prefill member with kv_role kv_both can also pull a prefix "
                   "another member holds (docs/deploy.md, \"Prefix pulls\")")
      ->check(CLI::IsMember({"prefill", "decode", "both"}));
  serve->add_option("--advertise-host", f->advertise_host,
                    "Address proxies reach this instance at (default: --host)");
}

StatusOr<std::unique_ptr<cluster::Registrar>> StartServeRegistration(const ServeRegistryFlags& f,
                                                                     const ServedInstance& in) {
  if (f.registry.empty()) return std::unique_ptr<cluster::Registrar>();
  KVF_ASSIGN_OR_RETURN(cluster::RegistryAddress address, cluster::ParseRegistryUrl(f.registry));
  const auto& kv = in.loop_options->kv_transfer;
  if (!kv) {
    return InvalidArgumentError(
        "a cluster member needs --kv-transfer-config (its kv_role says whether it prefills, "
        "decodes or both)");
  }
  const std::string host = f.advertise_host.empty() ? in.host : f.advertise_host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    return InvalidArgumentError("--host " + in.host +
                                " is not an address proxies can reach: give --advertise-host");
  }
  cluster::MemberInfo m;
  m.id = m.engine_id = in.loop->engine_id();
  m.kv_role = std::string(connector::KvRoleName(kv->kv_role));
  KVF_ASSIGN_OR_RETURN(m.role, cluster::MemberRoleFromKvRole(m.kv_role));
  if (!f.cluster_role.empty()) {
    KVF_ASSIGN_OR_RETURN(m.role, cluster::MemberRoleFromName(f.cluster_role));
    if ((m.role == cluster::MemberRole::kPrefill && m.kv_role == "kv_consumer") ||
        (m.role == cluster::MemberRole::kDecode && m.kv_role == "kv_producer")) {
      return InvalidArgumentError("--cluster-role " + f.cluster_role + " with kv_role " +
                                  m.kv_role + ": that connector cannot serve that leg");
    }
  }
  m.url = (in.https ? "https://" : "http://") + host + ":" + std::to_string(in.port);
  if (in.loop->side_channel_port() != 0) {
    m.side_channel = kv->side_channel_host + ":" + std::to_string(in.loop->side_channel_port());
  }
  m.model = in.model;
  m.tp_size = 1;
  m.kv_blocks_total = in.loop->num_kv_blocks_total();
  m.block_size = in.loop->block_size_logical();
  if (!in.loop->kv_events_endpoint().empty()) {
    m.kv_events = ReachableEndpoint(in.loop->kv_events_endpoint(), host);
    m.kv_events_replay = ReachableEndpoint(in.loop->kv_events_replay_endpoint(), host);
    m.prefix_hash_salt = in.loop->prefix_hash_salt();
  }
  cluster::RegistrarOptions o;
  o.address = std::move(address);
  o.ttl_s = f.ttl_s;
  return cluster::Registrar::Start(std::move(o), std::move(m));
}

void AddProxyClusterFlags(CLI::App* p, proxy::ProxyOptions* o) {
  p->add_option("--registry", o->registry,
                "Find prefill and decode instances in a cluster registry instead of "
                "--prefill/--decode: etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]");
  o->routing.mode = cluster::RoutingMode::kKv;  // the CLI's default (ProxyOptions' is affinity)
  p->add_option_function<std::string>(
       "--routing",
       [o](const std::string& name) {
         auto mode = cluster::ParseRoutingMode(name);
         if (!mode.ok())
           throw CLI::ValidationError("--routing", std::string(mode.status().message()));
         o->routing.mode = *mode;
       },
       "How P and D are chosen: kv (by what each member's KV events say it holds of the prompt; "
       "as affinity when no member publishes events), affinity, least-loaded, round-robin "
       "(docs/deploy.md, \"Routing\")")
      ->default_str("kv");
  p->add_option("--disagg-min-uncached-tokens", o->disagg_min_uncached_tokens,
                "Conditional disaggregation: a prompt with fewer tokens than this not already "
                "held by its decode instance goes to that instance alone, which prefills it "
                "(needs the prompt's tokens: --routing kv with members publishing KV events, "
                "or token-id prompts; 0: always prefill on a P)")
      ->capture_default_str();
  p->add_option("--prefix-pull-min-tokens", o->prefix_pull_min_tokens,
                "Prefix pulls: a prefill instance started with kv_role kv_both that lacks at "
                "least this many leading prompt tokens another member holds pulls them from it "
                "instead of computing them (docs/deploy.md, \"Prefix pulls\"; needs members "
                "publishing KV events; 0: never; default 128 with --routing kv, never otherwise)");
  p->add_option("--max-tries", o->max_tries,
                "Instances tried per leg before the error is the client's answer")
      ->capture_default_str();
  p->add_option("--affinity-prefix", o->routing.affinity_prefix,
                "Leading prompt bytes (or token ids) that send requests to the same prefill "
                "instance (0: no prefix affinity)")
      ->capture_default_str();
  p->add_option("--affinity-max-imbalance", o->routing.affinity_max_imbalance_tokens,
                "Pending prefill tokens the affinity instance may have beyond the least loaded "
                "one before it is skipped")
      ->capture_default_str();
  p->add_option("--min-free-kv-fraction", o->routing.min_free_kv_fraction,
                "Decode instances with less free KV than this are chosen only if all are")
      ->capture_default_str();
  p->add_flag("!--no-first-token-from-prefill", o->first_token_from_prefill,
              "Let decode instances compute the first token again (the older hand-off, for "
              "decode instances that do not resume after the prefill instance's first token, "
              "e.g. vLLM's)");
  p->add_option("--poll-interval-ms", o->poll_interval_ms,
                "How often each instance's /metrics (load and health) is read")
      ->capture_default_str();
}

std::string DescribeMembers(const proxy::ProxyOptions& o) {
  if (!o.registry.empty()) return "registry " + o.registry;
  return std::to_string(o.prefill_urls.size()) + " prefill and " +
         std::to_string(o.decode_urls.size()) + " decode instances";
}

}  // namespace kvferry::tools
