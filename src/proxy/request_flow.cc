#include "proxy/request_flow.h"

#include <httplib.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>
#include <vector>

#include "kvferry/common/logging.h"
#include "kvferry/http/http_error.h"
#include "kvferry/proxy/handoff.h"
#include "kvferry/proxy/upstream.h"
#include "proxy/first_token.h"
#include "proxy/request_features.h"
#include "proxy/stream_relay.h"
#include "proxy/upstream_auth.h"

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

// A member's fault, not the request's: a 5xx, or a 408 (our request to it did not arrive whole
// in time, as when the link to it was cut: the member never ran it). Worth another member.
bool MemberFault(int status) { return status >= 500 || status == 408; }

// A member's fault: worth another member; forwarded as is if no other member does better.
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

// The proxy stops: the stream ends with an error event and [DONE], D's stream is closed.
bool EndForShutdown(StreamRelay& relay, Route& route, httplib::DataSink& sink) {
  relay.Cancel();
  route.Finish(Route::Outcome::kNeutral);
  const std::string ev =
      "data: " +
      OpenAiErrorBody(UnavailableError("kvferry proxy is shutting down (--shutdown-timeout)")) +
      "\n\ndata: [DONE]\n\n";
  sink.write(ev.data(), ev.size());
  sink.done();
  return true;
}

// Waits up to `gap` for D's next chunk, in slices, so that a drain's cut is seen within one.
// False when the proxy is cutting its streams.
bool AwaitChunk(StreamRelay& relay, const Deadline& gap, const Drain* drain) {
  constexpr int64_t kSliceMs = 100;
  const auto cut = [drain] { return drain != nullptr && drain->cut(); };
  while (!cut() && !relay.WaitReady(Deadline::AfterMs(std::min(gap.RemainingMs(), kSliceMs)))) {
    if (gap.Expired()) return true;  // NextChunk reports the stall
  }
  return !cut();
}

// Relays the rest of D's stream into `sink` (the provider's return value): a failure mid-stream
// ends it with an OpenAI error event and [DONE]; tokens that went out are never repeated.
bool PumpRelay(StreamRelay& relay, Route& route, httplib::DataSink& sink, int64_t gap_ms,
               const std::string& who, cluster::Cluster* cluster, const std::string& id,
               const Drain* drain) {
  auto write = [&](const std::string& data) {
    if (sink.write(data.data(), data.size())) return true;
    relay.Cancel();  // client gone: close D's stream, D aborts the request
    route.Finish(Route::Outcome::kNeutral);
    return false;
  };
  while (true) {
    const Deadline gap = Deadline::AfterMs(gap_ms);
    if (!AwaitChunk(relay, gap, drain)) return EndForShutdown(relay, route, sink);
    auto chunk = relay.NextChunk(gap);
    if (!chunk.ok()) {
      KVF_LOG_WARN("decode {}: {} failed mid-stream: {}", id, who, chunk.status().ToString());
      route.Finish(Route::Outcome::kFailed);
      cluster->CountStreamAborted();
      const std::string ev =
          "data: " + OpenAiErrorBody(chunk.status().WithContext(who)) + "\n\ndata: [DONE]\n\n";
      sink.write(ev.data(), ev.size());
      sink.done();
      return true;
    }
    if (!chunk->has_value()) {
      route.Finish(Route::Outcome::kOk);
      sink.done();
      return true;
    }
    if (!write(**chunk)) return false;
  }
}

// kv routing's view of one request: the prompt's token ids, and the holdings the last pick saw
// (the P pick's when P answers: what the prediction is measured against).
struct KvView {
  std::vector<int32_t> ids;
  std::shared_ptr<const std::map<std::string, int64_t>> last;
};

// kv routing: the prompt's token ids (a member's /tokenize), and callbacks that give each pick
// the members' holdings at that moment and tell the index which member was chosen
// (cluster/route.h). Without a KvRouter, or when no member publishes events or the prompt
// cannot be tokenized, the request is routed without them (routing.h: kv then routes as
// affinity) and `view` stays null.
cluster::RouteRequest WithKvHoldings(cluster::RouteRequest request, KvRouter* kv,
                                     const std::string& body, std::shared_ptr<KvView>* view) {
  if (kv == nullptr || !kv->active()) return request;
  StatusOr<std::vector<int32_t>> tokens = kv->Tokenize(body);  // failures are counted there
  if (!tokens.ok()) return request;
  auto v = std::make_shared<KvView>();
  v->ids = std::move(tokens).value();
  request.prompt_tokens = static_cast<int64_t>(v->ids.size());
  request.holdings = [kv, v] {
    v->last = kv->Holdings(v->ids);
    return v->last;
  };
  request.on_pick = [kv, v](const std::string& member) { kv->NoteRouted(member, v->ids); };
  *view = std::move(v);
  return request;
}

// Tokens of the prompt that `member` held at the last pick (0: none known).
int64_t HeldAtLastPick(const KvView* view, const std::string& member) {
  if (view == nullptr || !view->last) return 0;
  auto it = view->last->find(member);
  return it == view->last->end() ? 0 : std::max<int64_t>(it->second, 0);
}

// The stream of a request resumed on D after P's first token: P's chunk already went out, D's
// leg is placed from inside the stream provider.
struct ResumedStream {
  std::string first_chunk;
  std::string decode_body;
  std::string prefill_member;
  std::unique_ptr<Route> first_decode;  // picked before the headers went out
  std::shared_ptr<StreamRelay> relay;
  std::shared_ptr<Route> route;
};

class Flow : public std::enable_shared_from_this<Flow> {
 public:
  Flow(cluster::Cluster* cluster, const FlowOptions& options, const httplib::Request& req,
       std::shared_ptr<Drain::Ticket> ticket)
      : cluster_(cluster),
        options_(options),
        req_(req),
        route_request_(WithKvHoldings(RouteRequestOf(req.body, options.affinity_prefix), options.kv,
                                      req.body, &kv_view_)),
        stream_(WantsStream(req.body)),
        ticket_(std::move(ticket)) {
    request_id_ = req.get_header_value("X-Request-Id");
    if (request_id_.empty()) request_id_ = NewRequestId();
  }

  void Run(httplib::Response& res);

 private:
  using Placed = std::pair<Attempt, std::unique_ptr<Route>>;
  // `first`: the member of the first try when already picked (null: pick one).
  template <typename TryOnce>
  Placed WithRetries(Leg leg, const std::string& avoid, TryOnce try_once,
                     std::unique_ptr<Route> first = nullptr);
  // need_params: P must return kv_transfer_params (not so for a request P answers whole).
  Attempt TryPrefill(const Route& route, const std::string& body, bool need_params);
  Attempt TryDecode(const Route& route, const std::string& body);
  // The upstream refused the proxy's own key (upstream_auth.h): the client's answer, at once
  // (another member would refuse the same key; none is blamed for it).
  Attempt KeyRefused(const UpstreamUrl& url, const std::string& who, int http_status) {
    return Answer(
        kUpstreamKeyRefusedStatus,
        UpstreamKeyRefused(cluster_, url, who, http_status, !options_.upstream.api_key.empty()),
        "application/json", Route::Outcome::kNeutral);
  }
  void Reply(httplib::Response& res, Attempt& a, Route* route);
  // The prefill try's body for `route`: `body`, or with a lease on another member's blocks of
  // the prompt (prefix_pull.h; *leased then, and prefix_source_ names the member).
  std::string PrefillBodyFor(const Route& route, const std::string& body, bool* leased);
  // Conditional disaggregation (step 0): true when the request was served by a D alone.
  bool ServedByDecodeAlone(httplib::Response& res);
  void RelayStream(httplib::Response& res, Attempt a, std::unique_ptr<Route> route);
  // P's answer is the client's: as it is, or as a stream of one chunk (and the usage event).
  void ReplyWithPrefillAnswer(httplib::Response& res, const std::string& p_body);
  // P's first token goes out at once as the stream's first chunk; D's tokens follow.
  void StreamAfterFirstToken(httplib::Response& res, const std::string& p_body,
                             std::string decode_body, std::string prefill_member);
  bool PumpResumed(ResumedStream& state, httplib::DataSink& sink);
  // P holds blocks for a request its first token ended (a stop string P's engine could not
  // see): a D given P's params and max_tokens 1 finishes at once and releases them.
  void ReleaseOnDecoder(const std::string& kv_transfer_params_json,
                        const std::string& prefill_member);
  RelayTimeouts Timeouts(Leg leg) const {
    return {options_.connect_timeout_ms,
            leg == Leg::kPrefill ? options_.prefill_timeout_ms : options_.decode_timeout_ms};
  }

  cluster::Cluster* const cluster_;
  const FlowOptions& options_;
  const httplib::Request& req_;
  std::shared_ptr<KvView> kv_view_;  // kv routing; before route_request_ (which fills it)
  const cluster::RouteRequest route_request_;
  const bool stream_;
  std::string request_id_;
  std::string prefix_source_;  // the member the last prefill try's prefix was leased from
  // Held for the request's life, streams included (drain.h); null without a drain.
  const std::shared_ptr<Drain::Ticket> ticket_;
};

template <typename TryOnce>
Flow::Placed Flow::WithRetries(Leg leg, const std::string& avoid, TryOnce try_once,
                               std::unique_ptr<Route> first) {
  std::vector<std::string> tried;
  Attempt last;
  for (int32_t t = 0; t < std::max(options_.max_tries, 1); ++t) {
    auto route = first != nullptr ? StatusOr<std::unique_ptr<Route>>(std::move(first))
                                  : cluster_->Pick(leg, route_request_, tried, avoid);
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

Attempt Flow::TryPrefill(const Route& route, const std::string& body, bool need_params) {
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
  if (RefusesProxyKey(*status)) return KeyRefused(*url, who, *status);
  if (MemberFault(*status)) return RetryWithAnswer(*status, *text, relay.content_type());
  if (*status != 200) {
    KVF_LOG_WARN("prefill {} answered {} for {}", url->ToString(), *status, request_id_);
    return Answer(*status, *text, relay.content_type(), Route::Outcome::kNeutral);
  }
  if (need_params) {
    auto params = ExtractKvTransferParams(*text);
    if (!params.ok()) return AnswerError(params.status().WithContext(who));
  }
  if (options_.kv != nullptr && kv_view_) {
    options_.kv->CountPrediction(HeldAtLastPick(kv_view_.get(), route.member_id()),
                                 CachedTokensOf(*text));
  }
  if (auto tokens = PromptTokensOf(*text); tokens && route_request_.prompt_token_ids < 0) {
    cluster_->ObservePromptTokens(route_request_.prompt_bytes, *tokens);
  }
  Attempt a;
  a.kind = Attempt::Kind::kOk;
  a.outcome = Route::Outcome::kOk;
  a.body = std::move(text).value();  // P's whole answer
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
    if (RefusesProxyKey(*status)) return KeyRefused(*url, who, *status);
    if (MemberFault(*status)) return RetryWithAnswer(*status, *text, content_type);
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

std::string Flow::PrefillBodyFor(const Route& route, const std::string& body, bool* leased) {
  *leased = false;
  prefix_source_.clear();
  PrefixPuller* pull = options_.prefix_pull;
  if (pull == nullptr || options_.kv == nullptr || !kv_view_) return body;
  const std::vector<cluster::MemberInfo> members = cluster_->MemberInfos(/*routable_only=*/true);
  auto p = std::find_if(members.begin(), members.end(),
                        [&](const cluster::MemberInfo& m) { return m.id == route.member_id(); });
  if (p == members.end()) return body;
  // Confirmed blocks only: the pick just noted the prompt as expected on P itself.
  const auto held = options_.kv->ConfirmedHoldings(kv_view_->ids);
  const std::optional<PrefixSource> source = cluster::ChoosePrefixSource(
      *p, held, members, static_cast<int64_t>(kv_view_->ids.size()), pull->min_tokens());
  if (!source) return body;
  std::string out = pull->BodyFor(*source, kv_view_->ids, req_.body, body, request_id_, leased);
  if (*leased) prefix_source_ = source->member_id;
  return out;
}

bool Flow::ServedByDecodeAlone(httplib::Response& res) {
  const int64_t tokens = route_request_.prompt_tokens >= 0 ? route_request_.prompt_tokens
                                                           : route_request_.prompt_token_ids;
  if (options_.disagg_min_uncached_tokens <= 0 || tokens < 0) return false;
  auto d_route = cluster_->Pick(Leg::kDecode, route_request_);
  if (!d_route.ok()) return false;  // the normal flow reports it
  const int64_t held = HeldAtLastPick(kv_view_.get(), (*d_route)->member_id());
  if (tokens - held >= options_.disagg_min_uncached_tokens) {
    (*d_route)->Finish(Route::Outcome::kNeutral);
    return false;
  }
  cluster_->CountDecodeOnly();
  auto [d, route] = WithRetries(
      Leg::kDecode, "", [&](const Route& r) { return TryDecode(r, req_.body); },
      std::move(d_route).value());
  if (route) res.set_header("X-Kvferry-Decode", route->member_id());
  if (d.kind != Attempt::Kind::kOk) {
    Reply(res, d, route.get());
  } else {
    RelayStream(res, std::move(d), std::move(route));
  }
  return true;
}

void Flow::Run(httplib::Response& res) {
  res.set_header("X-Request-Id", request_id_);
  if (ServedByDecodeAlone(res)) return;
  const std::optional<int64_t> max_tokens = ClientMaxTokens(req_.body);
  const bool first_token = options_.first_token_from_prefill;
  const bool whole_on_p = first_token && max_tokens && *max_tokens == 1;
  auto prefill_body = whole_on_p ? BuildWholeOnPrefillBody(req_.body) : BuildPrefillBody(req_.body);
  if (!prefill_body.ok()) {
    Attempt bad = AnswerError(prefill_body.status());
    return Reply(res, bad, nullptr);
  }
  auto [p, p_route] = WithRetries(Leg::kPrefill, "", [&](const Route& r) {
    bool leased = false;
    const std::string body = whole_on_p ? *prefill_body : PrefillBodyFor(r, *prefill_body, &leased);
    Attempt a = TryPrefill(r, body, /*need_params=*/!whole_on_p);
    if (leased && a.kind == Attempt::Kind::kOk) options_.prefix_pull->CountOutcome(a.body);
    return a;
  });
  if (p_route) res.set_header("X-Kvferry-Prefill", p_route->member_id());
  if (p_route && !prefix_source_.empty()) res.set_header("X-Kvferry-Prefix-Source", prefix_source_);
  if (p.kind != Attempt::Kind::kOk) return Reply(res, p, p_route.get());
  p_route->Finish(Route::Outcome::kOk);
  auto answer = ReadPrefillAnswer(p.body);
  if (!answer.ok()) {
    Attempt bad = AnswerError(answer.status().WithContext("prefill " + p_route->member_id()));
    return Reply(res, bad, nullptr);
  }
  if (!first_token) answer = WithoutFirstToken(*std::move(answer));
  if (whole_on_p || answer->ends_request()) {
    if (answer->holds_blocks) ReleaseOnDecoder(answer->kv_transfer_params, p_route->member_id());
    return ReplyWithPrefillAnswer(res, p.body);
  }

  auto decode_body = BuildDecodeBody(req_.body, answer->kv_transfer_params);
  if (!decode_body.ok()) {
    Attempt bad = AnswerError(decode_body.status());
    return Reply(res, bad, nullptr);
  }
  if (stream_ && answer->has_first_token) {
    return StreamAfterFirstToken(res, p.body, std::move(decode_body).value(), p_route->member_id());
  }
  auto [d, d_route] = WithRetries(Leg::kDecode, p_route->member_id(),
                                  [&](const Route& r) { return TryDecode(r, *decode_body); });
  if (d_route) res.set_header("X-Kvferry-Decode", d_route->member_id());
  if (d.kind != Attempt::Kind::kOk) return Reply(res, d, d_route.get());
  RelayStream(res, std::move(d), std::move(d_route));
}

void Flow::ReplyWithPrefillAnswer(httplib::Response& res, const std::string& p_body) {
  if (!stream_) {
    res.status = 200;
    res.set_content(p_body, "application/json");
    return;
  }
  auto chunk = PrefillAnswerAsChunk(p_body, /*final=*/true);
  if (!chunk.ok()) {
    Attempt bad = AnswerError(chunk.status());
    return Reply(res, bad, nullptr);
  }
  std::string events = std::move(chunk).value();
  if (WantsUsageChunk(req_.body)) events += PrefillUsageChunk(p_body);
  events += "data: [DONE]\n\n";
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_content(events, "text/event-stream");
}

void Flow::ReleaseOnDecoder(const std::string& kv_transfer_params_json,
                            const std::string& prefill_member) {
  nlohmann::json body = nlohmann::json::parse(req_.body, nullptr, false);
  if (!body.is_object()) return;
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  body["stream"] = false;
  body.erase("stream_options");
  auto release_body = BuildDecodeBody(body.dump(), kv_transfer_params_json);
  if (!release_body.ok()) return;
  auto [d, d_route] = WithRetries(Leg::kDecode, prefill_member,
                                  [&](const Route& r) { return TryDecode(r, *release_body); });
  if (d_route) d_route->Finish(d.outcome);
}

void Flow::StreamAfterFirstToken(httplib::Response& res, const std::string& p_body,
                                 std::string decode_body, std::string prefill_member) {
  auto chunk = PrefillAnswerAsChunk(p_body, /*final=*/false);
  if (!chunk.ok()) {
    Attempt bad = AnswerError(chunk.status());
    return Reply(res, bad, nullptr);
  }
  // The first D is picked now, so the headers can name it (a retry inside the stream cannot).
  auto d_route = cluster_->Pick(Leg::kDecode, route_request_, {}, prefill_member);
  if (!d_route.ok()) {
    Attempt none = AnswerError(d_route.status());
    return Reply(res, none, nullptr);
  }
  res.set_header("X-Kvferry-Decode", (*d_route)->member_id());
  auto state = std::make_shared<ResumedStream>();
  state->first_decode = std::move(d_route).value();
  state->first_chunk = std::move(chunk).value();
  state->decode_body = std::move(decode_body);
  state->prefill_member = std::move(prefill_member);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto self = shared_from_this();
  res.set_chunked_content_provider(
      "text/event-stream",
      [self, state](size_t, httplib::DataSink& sink) { return self->PumpResumed(*state, sink); },
      [state](bool) {
        if (state->relay) state->relay->Cancel();
        if (state->route) state->route->Finish(Route::Outcome::kNeutral);  // no-op when done
      });
}

bool Flow::PumpResumed(ResumedStream& state, httplib::DataSink& sink) {
  if (!sink.write(state.first_chunk.data(), state.first_chunk.size())) return false;
  // D's leg, with retries: nothing of D reached the client before its first chunk.
  auto [d, d_route] = WithRetries(
      Leg::kDecode, state.prefill_member,
      [&](const Route& r) { return TryDecode(r, state.decode_body); },
      std::move(state.first_decode));
  if (d.kind != Attempt::Kind::kOk) {
    if (d_route) d_route->Finish(d.outcome);
    const std::string error = !d.error.ok() ? OpenAiErrorBody(d.error)
                              : d.body.empty()
                                  ? OpenAiErrorBody(UnavailableError("no decode instance answered"))
                                  : d.body;
    const std::string ev = "data: " + error + "\n\ndata: [DONE]\n\n";
    sink.write(ev.data(), ev.size());
    sink.done();
    return true;
  }
  state.relay = d.relay;
  state.route = std::shared_ptr<Route>(std::move(d_route));
  if (!d.first_chunk.empty() && !sink.write(d.first_chunk.data(), d.first_chunk.size())) {
    state.relay->Cancel();
    return false;
  }
  return PumpRelay(*state.relay, *state.route, sink, options_.decode_timeout_ms,
                   "decode instance " + state.route->url(), cluster_, request_id_, options_.drain);
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
  const Drain* drain = options_.drain;
  res.set_chunked_content_provider(
      a.content_type.empty() ? "text/event-stream" : a.content_type,
      [relay, route, first, gap_ms, who, cluster, id, drain, ticket = ticket_](
          size_t, httplib::DataSink& sink) {
        (void)ticket;  // held by the provider: the request is in flight until it is destroyed
        const std::string head = std::exchange(*first, std::string());
        if (!head.empty() && !sink.write(head.data(), head.size())) {
          relay->Cancel();  // client gone: close D's stream, D aborts the request
          route->Finish(Route::Outcome::kNeutral);
          return false;
        }
        return PumpRelay(*relay, *route, sink, gap_ms, who, cluster, id, drain);
      },
      [relay, route](bool) {
        relay->Cancel();
        route->Finish(Route::Outcome::kNeutral);  // no-op when the stream finished it
      });
}

}  // namespace

void ServeGenerate(cluster::Cluster* cluster, const FlowOptions& options,
                   const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<Drain::Ticket> ticket;
  if (options.drain != nullptr && (ticket = options.drain->Admit()) == nullptr) {
    res.status = 503;
    res.set_content(OpenAiErrorBody(UnavailableError("kvferry proxy is shutting down")),
                    "application/json");
    return;
  }
  // Shared: a stream resumed after P's first token places its D leg from the stream provider,
  // which runs after this returns (the request outlives it: httplib writes the response first).
  std::make_shared<Flow>(cluster, options, req, std::move(ticket))->Run(res);
}

}  // namespace kvferry::proxy
