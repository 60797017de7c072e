#include "proxy/request_flow.h"

#include <httplib.h>

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kvferry/common/logging.h"
#include "kvferry/http/http_error.h"
#include "kvferry/proxy/handoff.h"
#include "kvferry/proxy/upstream.h"
#include "proxy/request_features.h"
#include "proxy/stream_relay.h"

namespace kvferry::proxy {

namespace {

using cluster::Leg;
using cluster::Route;
using ::kvferry::http::HttpStatusFor;
using ::kvferry::http::OpenAiErrorBody;

std::string NewRequestId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

// How one try of a leg on one member ended.
struct Attempt {
  enum class Kind : uint8_t {
    kOk,     // the leg may go on (P's params in `body`; a D stream's first chunk)
    kRetry,  // the member failed before anything reached the client: try another
    kAnswer  // this is the client's answer (`error`, or the upstream's status and body)
  };
  Kind kind = Kind::kRetry;
  Route::Outcome outcome = Route::Outcome::kFailed;
  Status error = Status::Ok();
  int http_status = 0;
  std::string body;
  std::string content_type;
  std::shared_ptr<StreamRelay> relay;
  std::string first_chunk;
};

Attempt Retry(Status error) {
  Attempt a;
  a.error = std::move(error);
  return a;
}

// A 5xx answer: worth another member; forwarded as is if no other member does better.
Attempt RetryWithAnswer(int status, std::string body, std::string content_type) {
  Attempt a;
  a.http_status = status;
  a.body = std::move(body);
  a.content_type = std::move(content_type);
  return a;
}

Attempt Answer(int status, std::string body, std::string content_type, Route::Outcome outcome) {
  Attempt a = RetryWithAnswer(status, std::move(body), std::move(content_type));
  a.kind = Attempt::Kind::kAnswer;
  a.outcome = outcome;
  return a;
}

Attempt AnswerError(Status error) {
  Attempt a = Retry(std::move(error));
  a.kind = Attempt::Kind::kAnswer;
  a.outcome = Route::Outcome::kNeutral;
  return a;
}

class Flow {
 public:
  Flow(cluster::Cluster* cluster, const FlowOptions& options, const httplib::Request& req)
      : cluster_(cluster),
        options_(options),
        req_(req),
        route_request_(RouteRequestOf(req.body, options.affinity_prefix)),
        stream_(WantsStream(req.body)) {
    request_id_ = req.get_header_value("X-Request-Id");
    if (request_id_.empty()) request_id_ = NewRequestId();
  }

  void Run(httplib::Response& res);

 private:
  using Placed = std::pair<Attempt, std::unique_ptr<Route>>;
  template <typename TryOnce>
  Placed WithRetries(Leg leg, const std::string& avoid, TryOnce try_once);
  Attempt TryPrefill(const Route& route, const std::string& body);
  Attempt TryDecode(const Route& route, const std::string& body);
  void Reply(httplib::Response& res, Attempt& a, Route* route);
  void RelayStream(httplib::Response& res, Attempt a, std::unique_ptr<Route> route);
  RelayTimeouts Timeouts(Leg leg) const {
    return {options_.connect_timeout_ms,
            leg == Leg::kPrefill ? options_.prefill_timeout_ms : options_.decode_timeout_ms};
  }

  cluster::Cluster* const cluster_;
  const FlowOptions& options_;
  const httplib::Request& req_;
  const cluster::RouteRequest route_request_;
  const bool stream_;
  std::string request_id_;
};

template <typename TryOnce>
Flow::Placed Flow::WithRetries(Leg leg, const std::string& avoid, TryOnce try_once) {
  std::vector<std::string> tried;
  Attempt last;
  for (int32_t t = 0; t < std::max(options_.max_tries, 1); ++t) {
    auto route = cluster_->Pick(leg, route_request_, tried, avoid);
    if (!route.ok()) {
      if (t == 0) return {AnswerError(route.status()), nullptr};
      break;  // nobody left to try: answer with the last failure
    }
    if (t > 0) {
      cluster_->CountRetry(leg);
      KVF_LOG_WARN(
          "{} {}: {} failed ({}); trying {}", cluster::LegName(leg), request_id_, tried.back(),
          last.error.ok() ? "HTTP " + std::to_string(last.http_status) : last.error.ToString(),
          (*route)->member_id());
    }
    last = try_once(**route);
    if (last.kind != Attempt::Kind::kRetry) return {std::move(last), std::move(route).value()};
    (*route)->Finish(Route::Outcome::kFailed);
    tried.push_back((*route)->member_id());
  }
  last.kind = Attempt::Kind::kAnswer;
  return {std::move(last), nullptr};
}

Attempt Flow::TryPrefill(const Route& route, const std::string& body) {
  auto url = ParseUpstreamUrl(route.url());
  if (!url.ok()) return Retry(url.status());
  const std::string who = "prefill instance " + url->ToString();
  const Deadline deadline =
      Deadline::AfterMs(options_.connect_timeout_ms + options_.prefill_timeout_ms);
  StreamRelay relay(*url, options_.upstream, req_.path, request_id_, body, Timeouts(Leg::kPrefill));
  auto status = relay.WaitStatus(deadline);
  if (!status.ok()) return Retry(status.status().WithContext(who));
  auto text = relay.ReadAll(deadline);
  if (!text.ok()) return Retry(text.status().WithContext(who));
  if (*status >= 500) return RetryWithAnswer(*status, *text, relay.content_type());
  if (*status != 200) {
    KVF_LOG_WARN("prefill {} answered {} for {}", url->ToString(), *status, request_id_);
    return Answer(*status, *text, relay.content_type(), Route::Outcome::kNeutral);
  }
  auto params = ExtractKvTransferParams(*text);
  if (!params.ok()) return AnswerError(params.status().WithContext(who));
  if (auto tokens = PromptTokensOf(*text); tokens && route_request_.prompt_token_ids < 0) {
    cluster_->ObservePromptTokens(route_request_.prompt_bytes, *tokens);
  }
  Attempt a;
  a.kind = Attempt::Kind::kOk;
  a.outcome = Route::Outcome::kOk;
  a.body = std::move(params).value();
  return a;
}

Attempt Flow::TryDecode(const Route& route, const std::string& body) {
  auto url = ParseUpstreamUrl(route.url());
  if (!url.ok()) return Retry(url.status());
  const std::string who = "decode instance " + url->ToString();
  auto relay = std::make_shared<StreamRelay>(*url, options_.upstream, req_.path, request_id_, body,
                                             Timeouts(Leg::kDecode));
  const Deadline first =
      Deadline::AfterMs(options_.connect_timeout_ms + options_.decode_timeout_ms);
  auto status = relay->WaitStatus(first);
  if (!status.ok()) return Retry(status.status().WithContext(who));
  const std::string content_type = relay->content_type();
  if (*status != 200 || !stream_) {
    auto text = relay->ReadAll(first);
    if (!text.ok()) return Retry(text.status().WithContext(who));
    if (*status >= 500) return RetryWithAnswer(*status, *text, content_type);
    return Answer(*status, *text, content_type,
                  *status == 200 ? Route::Outcome::kOk : Route::Outcome::kNeutral);
  }
  auto chunk = relay->NextChunk(first);
  if (!chunk.ok()) return Retry(chunk.status().WithContext(who));
  if (!chunk->has_value()) return Retry(UnavailableError(who + ": stream closed before a token"));
  Attempt a;
  a.kind = Attempt::Kind::kOk;
  a.outcome = Route::Outcome::kOk;
  a.content_type = content_type;
  a.relay = std::move(relay);
  a.first_chunk = std::move(**chunk);
  return a;
}

void Flow::Reply(httplib::Response& res, Attempt& a, Route* route) {
  if (route != nullptr) route->Finish(a.outcome);
  if (!a.error.ok()) {
    res.status = HttpStatusFor(a.error.code());
    res.set_content(OpenAiErrorBody(a.error), "application/json");
    return;
  }
  res.status = a.http_status;
  res.set_content(a.body, a.content_type.empty() ? "application/json" : a.content_type);
}

void Flow::Run(httplib::Response& res) {
  res.set_header("X-Request-Id", request_id_);
  auto prefill_body = BuildPrefillBody(req_.body);
  if (!prefill_body.ok()) {
    Attempt bad = AnswerError(prefill_body.status());
    return Reply(res, bad, nullptr);
  }
  auto [p, p_route] =
      WithRetries(Leg::kPrefill, "", [&](const Route& r) { return TryPrefill(r, *prefill_body); });
  if (p_route) res.set_header("X-Kvferry-Prefill", p_route->member_id());
  if (p.kind != Attempt::Kind::kOk) return Reply(res, p, p_route.get());
  p_route->Finish(Route::Outcome::kOk);

  auto decode_body = BuildDecodeBody(req_.body, p.body);
  if (!decode_body.ok()) {
    Attempt bad = AnswerError(decode_body.status());
    return Reply(res, bad, nullptr);
  }
  auto [d, d_route] = WithRetries(Leg::kDecode, p_route->member_id(),
                                  [&](const Route& r) { return TryDecode(r, *decode_body); });
  if (d_route) res.set_header("X-Kvferry-Decode", d_route->member_id());
  if (d.kind != Attempt::Kind::kOk) return Reply(res, d, d_route.get());
  RelayStream(res, std::move(d), std::move(d_route));
}

void Flow::RelayStream(httplib::Response& res, Attempt a, std::unique_ptr<Route> route_owned) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  std::shared_ptr<Route> route(std::move(route_owned));
  auto relay = a.relay;
  auto first = std::make_shared<std::string>(std::move(a.first_chunk));
  const int64_t gap_ms = options_.decode_timeout_ms;
  const std::string who = "decode instance " + route->url();
  cluster::Cluster* cluster = cluster_;
  const std::string id = request_id_;
  res.set_chunked_content_provider(
      a.content_type.empty() ? "text/event-stream" : a.content_type,
      [relay, route, first, gap_ms, who, cluster, id](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& data) {
          if (sink.write(data.data(), data.size())) return true;
          relay->Cancel();  // client gone: close D's stream, D aborts the request
          route->Finish(Route::Outcome::kNeutral);
          return false;
        };
        if (!first->empty() && !write(std::exchange(*first, std::string()))) return false;
        while (true) {
          auto chunk = relay->NextChunk(Deadline::AfterMs(gap_ms));
          if (!chunk.ok()) {
            // Tokens went out already: end the stream with an error, never repeat them.
            KVF_LOG_WARN("decode {}: {} failed mid-stream: {}", id, who, chunk.status().ToString());
            route->Finish(Route::Outcome::kFailed);
            cluster->CountStreamAborted();
            const std::string ev = "data: " + OpenAiErrorBody(chunk.status().WithContext(who)) +
                                   "\n\ndata: [DONE]\n\n";
            sink.write(ev.data(), ev.size());
            sink.done();
            return true;
          }
          if (!chunk->has_value()) {
            route->Finish(Route::Outcome::kOk);
            sink.done();
            return true;
          }
          if (!write(**chunk)) return false;
        }
      },
      [relay, route](bool) {
        relay->Cancel();
        route->Finish(Route::Outcome::kNeutral);  // no-op when the stream finished it
      });
}

}  // namespace

void ServeGenerate(cluster::Cluster* cluster, const FlowOptions& options,
                   const httplib::Request& req, httplib::Response& res) {
  Flow(cluster, options, req).Run(res);
}

}  // namespace kvferry::proxy
