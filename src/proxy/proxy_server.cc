#include "kvferry/proxy/proxy_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kvferry/cluster/cluster.h"
#include "kvferry/common/logging.h"
#include "kvferry/http/connection_threads.h"
#include "kvferry/http/http_error.h"
#include "kvferry/http/http_listener.h"
#include "kvferry/http/openapi.h"
#include "kvferry/http/request_deadline.h"
#include "kvferry/http/route_errors.h"
#include "kvferry/proxy/upstream.h"
#include "proxy/drain.h"
#include "proxy/request_flow.h"
#include "proxy/upstream_auth.h"
#include "proxy/upstream_client.h"

namespace kvferry::proxy {

using ::kvferry::http::HttpStatusFor;
using ::kvferry::http::OpenAiErrorBody;
using ::kvferry::http::StartHttpListener;

namespace {

cluster::ClusterOptions ClusterOptionsOf(const ProxyOptions& o) {
  cluster::ClusterOptions c;
  c.prefill_urls = o.prefill_urls;
  c.decode_urls = o.decode_urls;
  c.registry = o.registry;
  c.routing = o.routing;
  c.poll_interval_ms = o.poll_interval_ms;
  c.poll_timeout_ms = o.connect_timeout_ms;
  // Members are read as they are served: TLS verified against the CA, the upstream key.
  c.fetch_metrics = [access = o.upstream](const std::string& url, int64_t timeout_ms) {
    return FetchMetrics(url, access, timeout_ms);
  };
  return c;
}

void ReplyError(httplib::Response& res, const Status& s) {
  res.status = HttpStatusFor(s.code());
  res.set_content(OpenAiErrorBody(s), "application/json");
}

}  // namespace

// How long Start waits for a registry proxy's first routable view of its cluster.
constexpr int64_t kFirstViewWaitMs = 5000;

struct ProxyServer::Impl {
  ProxyOptions options;
  FlowOptions flow;
  std::unique_ptr<cluster::Cluster> cluster;  // outlives the handlers (destroyed after http)
  std::unique_ptr<httplib::Server> http;      // plain or TLS (MakeHttpServer)
  std::shared_ptr<http::ConnectionThreads> connections;  // its task queue
  std::unique_ptr<http::RequestDeadline> deadline;       // for reading each request
  Drain drain;                                           // flow.drain points here
  std::unique_ptr<KvRouter> kv;  // --routing kv or prefix pulls: flow.kv; followed by kv_sync
  std::unique_ptr<PrefixPuller> prefix_pull;  // flow.prefix_pull points here
  std::thread kv_sync;
  std::atomic<bool> kv_stop{false};
  std::thread thread;
  int bound_port = 0;

  // kv routing: the KV index follows the membership until Stop().
  void FollowMembers() {
    while (!kv_stop.load()) {
      kv->SyncMembers(cluster->MemberInfos());
      for (int i = 0; i < 5 && !kv_stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    kv->SyncMembers({});
  }

  // Every route the proxy answers, each behind the request deadline.
  void InstallRoutes(httplib::Server& http);

  void HandleGenerate(const httplib::Request& req, httplib::Response& res) {
    ServeGenerate(cluster.get(), flow, req, res);
  }

  // GET /v1/models, answered by a D.
  void ForwardModels(httplib::Response& res) {
    auto route = cluster->Pick(cluster::Leg::kDecode, {});
    if (!route.ok()) return ReplyError(res, route.status());
    auto parsed = ParseUpstreamUrl((*route)->url());
    if (!parsed.ok()) return ReplyError(res, parsed.status());
    const UpstreamUrl d = *parsed;
    const std::string who = "decode instance " + d.ToString();
    std::unique_ptr<httplib::Client> c = MakeUpstreamClient(d, options.upstream);
    c->set_connection_timeout(std::chrono::milliseconds(options.connect_timeout_ms));
    c->set_read_timeout(std::chrono::milliseconds(options.connect_timeout_ms + 5000));
    auto r = c->Get("/v1/models");
    if (!r) return ReplyError(res, UpstreamError(who, static_cast<int>(r.error())));
    if (RefusesProxyKey(r->status)) {
      res.status = kUpstreamKeyRefusedStatus;
      res.set_content(
          UpstreamKeyRefused(cluster.get(), d, who, r->status, !options.upstream.api_key.empty()),
          "application/json");
      return;
    }
    res.status = r->status;
    res.set_content(r->body, "application/json");
  }
};

ProxyServer::ProxyServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProxyServer::~ProxyServer() { Stop(); }

StatusOr<std::unique_ptr<ProxyServer>> ProxyServer::Create(ProxyOptions options) {
  if (options.registry.empty()) {
    if (options.prefill_urls.empty()) return InvalidArgumentError("no --prefill instance given");
    if (options.decode_urls.empty()) return InvalidArgumentError("no --decode instance given");
    for (const auto* urls : {&options.prefill_urls, &options.decode_urls}) {
      for (const std::string& u : *urls) KVF_RETURN_IF_ERROR(ParseUpstreamUrl(u).status());
    }
  }
  auto impl = std::make_unique<Impl>();
  KVF_ASSIGN_OR_RETURN(impl->cluster, cluster::Cluster::Start(ClusterOptionsOf(options)));
  impl->flow = {options.connect_timeout_ms,      options.prefill_timeout_ms,
                options.decode_timeout_ms,       options.max_tries,
                options.routing.affinity_prefix, options.upstream};
  impl->flow.first_token_from_prefill = options.first_token_from_prefill;
  impl->flow.drain = &impl->drain;
  impl->flow.disagg_min_uncached_tokens = options.disagg_min_uncached_tokens;
  const bool kv_routing = options.routing.mode == cluster::RoutingMode::kKv;
  const int64_t pull_min =
      options.prefix_pull_min_tokens >= 0 ? options.prefix_pull_min_tokens : (kv_routing ? 128 : 0);
  if (pull_min > 0) {
    impl->prefix_pull =
        std::make_unique<PrefixPuller>(options.upstream, options.prefill_timeout_ms, pull_min);
    impl->flow.prefix_pull = impl->prefix_pull.get();
  }
  if (kv_routing || pull_min > 0) {
    impl->kv = std::make_unique<KvRouter>(options.upstream, options.connect_timeout_ms);
    impl->flow.kv = impl->kv.get();
    Impl* raw = impl.get();
    impl->kv_sync = std::thread([raw] { raw->FollowMembers(); });
  }
  impl->options = std::move(options);
  return std::unique_ptr<ProxyServer>(new ProxyServer(std::move(impl)));
}

void ProxyServer::Impl::InstallRoutes(httplib::Server& http) {
  http::RequestDeadline& arrived = *deadline;
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    http.Post(path, arrived.Guard([this](const httplib::Request& req, httplib::Response& res) {
      HandleGenerate(req, res);
    }));
  }
  for (const char* path : {"/health", "/healthcheck"}) {
    http.Get(path, arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
      const bool up = !drain.draining();
      res.status = up ? 200 : 503;
      res.set_content(up ? "{\"status\":\"ok\"}" : "{\"status\":\"draining\"}", "application/json");
    }));
  }
  http.Get("/metrics", arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(cluster->RenderMetrics() + http::ConnectionMetricsText(connections->load()) +
                        http::RequestDeadlineMetricsText(*deadline) +
                        (kv ? kv->RenderMetrics() : std::string()) +
                        (prefix_pull ? prefix_pull->RenderMetrics() : std::string()),
                    "text/plain; version=0.0.4");
  }));
  http.Get("/openapi.json", arrived.Guard([openapi = http::OpenApiDocument({.proxy = true})](
                                              const httplib::Request&, httplib::Response& res) {
    res.set_content(openapi, "application/json");
  }));
  http.Get("/cluster", arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(cluster->RenderTable(), "application/json");
  }));
  http.Get("/v1/models", arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
    ForwardModels(res);
  }));
}

Status ProxyServer::Start() {
  Impl* impl = impl_.get();
  KVF_ASSIGN_OR_RETURN(impl->http, http::MakeHttpServer(impl->options.tls));
  httplib::Server& http = *impl->http;
  KVF_RETURN_IF_ERROR(http::RequireApiKeys(http, impl->options.api_keys));
  impl->connections = std::make_shared<http::ConnectionThreads>(impl->options.max_connections);
  http.new_task_queue = [q = impl->connections] { return http::ConnectionThreads::Handle(q); };
  impl->deadline = std::make_unique<http::RequestDeadline>(http::RequestDeadline::Options{
      .timeout = std::chrono::milliseconds(impl->options.request_read_timeout_ms),
      .plaintext = !impl->options.tls.enabled()});
  impl->deadline->Install(http);
  http.set_payload_max_length(64u << 20);
  http.set_tcp_nodelay(true);
  impl->InstallRoutes(http);
  http::InstallErrorHandler(http, {{"POST", "/v1/completions"},
                                   {"POST", "/v1/chat/completions"},
                                   {"GET", "/v1/models"},
                                   {"GET", "/openapi.json"},
                                   {"GET", "/health"},
                                   {"GET", "/healthcheck"},
                                   {"GET", "/metrics"},
                                   {"GET", "/cluster"}});
  // A registry proxy first learns its members (the registry's list, one probe each), so that
  // it does not answer 503 "the registry is unreachable" for its first moments (found by the
  // chaos soak when a proxy restarts under load); bounded: a cluster without a healthy P or D
  // gets its 503s as before.
  if (impl->cluster->uses_registry() &&
      !impl->cluster->WaitRoutable(Deadline::AfterMs(kFirstViewWaitMs))) {
    KVF_LOG_WARN("kvferry proxy: no healthy prefill and decode member after {} ms; serving anyway",
                 kFirstViewWaitMs);
  }
  KVF_ASSIGN_OR_RETURN(impl->bound_port, StartHttpListener(http, impl->options.host,
                                                           impl->options.port, &impl->thread));
  impl->connections->SetListenPort(impl->bound_port);
  impl->deadline->Start(impl->bound_port);
  return Status::Ok();
}

int ProxyServer::port() const { return impl_->bound_port; }

void ProxyServer::BeginDrain() { impl_->drain.Begin(); }

bool ProxyServer::WaitIdle(const Deadline& deadline) { return impl_->drain.WaitIdle(deadline); }

void ProxyServer::CutStreams() { impl_->drain.Cut(); }

int64_t ProxyServer::in_flight() const { return impl_->drain.in_flight(); }

void ProxyServer::Shutdown(int64_t drain_timeout_ms) {
  BeginDrain();
  if (!WaitIdle(Deadline::AfterMs(drain_timeout_ms))) {
    KVF_LOG_WARN("kvferry proxy: {} request(s) still running after {} ms; ending them", in_flight(),
                 drain_timeout_ms);
    CutStreams();
    WaitIdle(Deadline::AfterMs(1000));
  }
  Stop();
}

void ProxyServer::Stop() {
  if (impl_->thread.joinable()) {
    impl_->http->stop();
    impl_->thread.join();
    impl_->deadline->Stop();
  }
  impl_->kv_stop.store(true);
  if (impl_->kv_sync.joinable()) impl_->kv_sync.join();
  impl_->cluster->Stop();
}

}  // namespace kvferry::proxy
