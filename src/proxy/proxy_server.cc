#include "kvferry/proxy/proxy_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "kvferry/common/logging.h"
#include "kvferry/http/http_error.h"
#include "kvferry/http/http_listener.h"
#include "kvferry/proxy/handoff.h"
#include "kvferry/proxy/upstream.h"
#include "proxy/stream_relay.h"
#include "proxy/upstream_client.h"

namespace kvferry::proxy {

using ::kvferry::http::HttpStatusFor;
using ::kvferry::http::OpenAiErrorBody;
using ::kvferry::http::StartHttpListener;

namespace {

std::string NewRequestId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

void ReplyError(httplib::Response& res, const Status& s) {
  res.status = HttpStatusFor(s.code());
  res.set_content(OpenAiErrorBody(s), "application/json");
}

}  // namespace

struct ProxyServer::Impl {
  ProxyOptions options;
  std::unique_ptr<RoundRobin> prefill;
  std::unique_ptr<RoundRobin> decode;
  std::unique_ptr<httplib::Server> http;  // plain or TLS (MakeHttpServer)
  std::thread thread;
  int bound_port = 0;

  RelayTimeouts PrefillTimeouts() const {
    return {options.connect_timeout_ms, options.prefill_timeout_ms};
  }
  RelayTimeouts DecodeTimeouts() const {
    return {options.connect_timeout_ms, options.decode_timeout_ms};
  }

  void HandleGenerate(const httplib::Request& req, httplib::Response& res);
};

void ProxyServer::Impl::HandleGenerate(const httplib::Request& req, httplib::Response& res) {
  std::string request_id = req.get_header_value("X-Request-Id");
  if (request_id.empty()) request_id = NewRequestId();
  res.set_header("X-Request-Id", request_id);

  auto prefill_body = BuildPrefillBody(req.body);
  if (!prefill_body.ok()) return ReplyError(res, prefill_body.status());
  const UpstreamUrl p = prefill->Next();
  const UpstreamUrl d = decode->Next();

  // Leg 1: prefill on P.
  std::string kv_params;
  {
    const Deadline deadline =
        Deadline::AfterMs(options.connect_timeout_ms + options.prefill_timeout_ms);
    StreamRelay relay(p, options.upstream, req.path, request_id, std::move(prefill_body).value(),
                      PrefillTimeouts());
    auto status = relay.WaitStatus(deadline);
    if (!status.ok()) {
      return ReplyError(res, status.status().WithContext("prefill instance " + p.ToString()));
    }
    auto body = relay.ReadAll(deadline);
    if (!body.ok()) {
      return ReplyError(res, body.status().WithContext("prefill instance " + p.ToString()));
    }
    if (*status != 200) {
      KVF_LOG_WARN("prefill {} answered {} for {}", p.ToString(), *status, request_id);
      res.status = *status;
      res.set_content(*body, "application/json");
      return;
    }
    auto extracted = ExtractKvTransferParams(*body);
    if (!extracted.ok()) {
      return ReplyError(res, extracted.status().WithContext("prefill instance " + p.ToString()));
    }
    kv_params = std::move(extracted).value();
  }

  // Leg 2: decode on D, passed through.
  auto decode_body = BuildDecodeBody(req.body, kv_params);
  if (!decode_body.ok()) return ReplyError(res, decode_body.status());
  auto relay = std::make_shared<StreamRelay>(d, options.upstream, req.path, request_id,
                                             std::move(decode_body).value(), DecodeTimeouts());
  const Deadline first = Deadline::AfterMs(options.connect_timeout_ms + options.decode_timeout_ms);
  auto status = relay->WaitStatus(first);
  if (!status.ok()) {
    return ReplyError(res, status.status().WithContext("decode instance " + d.ToString()));
  }
  const std::string content_type = relay->content_type();
  if (*status != 200 || !WantsStream(req.body)) {
    auto body = relay->ReadAll(first);
    if (!body.ok()) {
      return ReplyError(res, body.status().WithContext("decode instance " + d.ToString()));
    }
    res.status = *status;
    res.set_content(*body, content_type.empty() ? "application/json" : content_type);
    return;
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  const int64_t gap_ms = options.decode_timeout_ms;
  const std::string who = "decode instance " + d.ToString();
  res.set_chunked_content_provider(
      content_type.empty() ? "text/event-stream" : content_type,
      [relay, gap_ms, who](size_t, httplib::DataSink& sink) {
        while (true) {
          auto chunk = relay->NextChunk(Deadline::AfterMs(gap_ms));
          if (!chunk.ok()) {
            const std::string ev =
                "data: " + OpenAiErrorBody(chunk.status().WithContext(who)) + "\n\n";
            sink.write(ev.data(), ev.size());
            sink.done();
            return true;
          }
          if (!chunk->has_value()) {
            sink.done();
            return true;
          }
          if (!sink.write((*chunk)->data(), (*chunk)->size())) {
            relay->Cancel();  // client gone: close D's stream, D aborts the request
            return false;
          }
        }
      },
      [relay](bool) { relay->Cancel(); });
}

ProxyServer::ProxyServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProxyServer::~ProxyServer() { Stop(); }

StatusOr<std::unique_ptr<ProxyServer>> ProxyServer::Create(ProxyOptions options) {
  if (options.prefill_urls.empty()) return InvalidArgumentError("no --prefill instance given");
  if (options.decode_urls.empty()) return InvalidArgumentError("no --decode instance given");
  std::vector<UpstreamUrl> ps, ds;
  for (const std::string& u : options.prefill_urls) {
    KVF_ASSIGN_OR_RETURN(UpstreamUrl url, ParseUpstreamUrl(u));
    ps.push_back(std::move(url));
  }
  for (const std::string& u : options.decode_urls) {
    KVF_ASSIGN_OR_RETURN(UpstreamUrl url, ParseUpstreamUrl(u));
    ds.push_back(std::move(url));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->prefill = std::make_unique<RoundRobin>(std::move(ps));
  impl->decode = std::make_unique<RoundRobin>(std::move(ds));
  return std::unique_ptr<ProxyServer>(new ProxyServer(std::move(impl)));
}

Status ProxyServer::Start() {
  Impl* impl = impl_.get();
  KVF_ASSIGN_OR_RETURN(impl->http, http::MakeHttpServer(impl->options.tls));
  httplib::Server& http = *impl->http;
  KVF_RETURN_IF_ERROR(http::RequireApiKeys(http, impl->options.api_keys));
  const int threads = impl->options.num_http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(64u << 20);
  http.set_tcp_nodelay(true);
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    http.Post(path, [impl](const httplib::Request& req, httplib::Response& res) {
      impl->HandleGenerate(req, res);
    });
  }
  for (const char* path : {"/health", "/healthcheck"}) {
    http.Get(path, [](const httplib::Request&, httplib::Response& res) {
      res.status = 200;
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
  }
  http.Get("/v1/models", [impl](const httplib::Request&, httplib::Response& res) {
    const UpstreamUrl d = impl->decode->Next();
    std::unique_ptr<httplib::Client> c = MakeUpstreamClient(d, impl->options.upstream);
    c->set_connection_timeout(std::chrono::milliseconds(impl->options.connect_timeout_ms));
    c->set_read_timeout(std::chrono::milliseconds(impl->options.connect_timeout_ms + 5000));
    auto r = c->Get("/v1/models");
    if (!r) {
      return ReplyError(
          res, UpstreamError("decode instance " + d.ToString(), static_cast<int>(r.error())));
    }
    res.status = r->status;
    res.set_content(r->body, "application/json");
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    res.set_content(OpenAiErrorBody(res.status, "Not found: " + req.method + " " + req.path),
                    "application/json");
  });
  KVF_ASSIGN_OR_RETURN(impl->bound_port, StartHttpListener(http, impl->options.host,
                                                           impl->options.port, &impl->thread));
  return Status::Ok();
}

int ProxyServer::port() const { return impl_->bound_port; }

void ProxyServer::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->http->stop();
  impl_->thread.join();
}

}  // namespace kvferry::proxy
