#include "kvferry/server/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvferry/common/logging.h"
#include "kvferry/engine/prompt_limits.h"
#include "kvferry/http/connection_threads.h"
#include "kvferry/http/http_error.h"
#include "kvferry/http/http_listener.h"
#include "kvferry/http/openapi.h"
#include "kvferry/http/request_deadline.h"
#include "kvferry/http/route_errors.h"
#include "kvferry/server/openai_protocol.h"
#include "server/chat_template.h"
#include "server/output_assembler.h"

namespace kvferry::server {

using ::kvferry::http::HttpStatusFor;
using ::kvferry::http::OpenAiErrorBody;
using ::kvferry::http::StartHttpListener;
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Every route `serve` answers: the error handler's 405s and the metrics' endpoint labels both
// read this one list (the handlers are registered in Start()).
const std::vector<http::Route>& Routes() {
  static const std::vector<http::Route> routes = {
      {"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"},
      {"GET", "/v1/models"},       {"GET", "/openapi.json"},
      {"GET", "/health"},          {"GET", "/metrics"}};
  return routes;
}

// The endpoint label of a refused request: its route, or "other" for paths that are none (a
// client must not be able to grow the label set).
std::string RouteLabel(const std::string& path) {
  for (const http::Route& route : Routes()) {
    if (path == route.path) return path;
  }
  return "other";
}

// The state of one generation request, shared by its handler and its stream provider.
struct Inflight {
  ResponseHeader header;
  std::string engine_request_id;
  std::string endpoint;
  std::shared_ptr<OutputChannel> channel;
  std::unique_ptr<OutputAssembler> assembler;
  bool include_usage = false;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;
  KvHandoff kv;  // from the final output
  Clock::time_point arrival;
  Clock::time_point last_token;
  bool got_first_token = false;
  bool done = false;  // finished and accounted
  // P of a P/D pair (do_remote_decode): a first token a D continues is held back as a stream
  // holds it (OutputAssembler::AddAsStreamHead).
  bool prefill_leg = false;
  // D resuming from P's first token: the engine reports that token first; it goes into the
  // text and the answer, but a stream does not send it again (the proxy sent P's).
  bool resumed = false;
  bool first_token_pending = false;
  Deadline deadline = Deadline::AfterMs(0);
};

// `out` split after its first token: {that token alone, not finished; the rest}.
std::pair<engine::RequestOutput, engine::RequestOutput> SplitFirstToken(engine::RequestOutput out) {
  engine::RequestOutput head;
  head.request_id = out.request_id;
  head.num_prompt_tokens = out.num_prompt_tokens;
  head.new_token_ids.push_back(out.new_token_ids.front());
  out.new_token_ids.erase(out.new_token_ids.begin());
  if (!out.new_logprobs.empty()) {
    head.new_logprobs.push_back(out.new_logprobs.front());
    out.new_logprobs.erase(out.new_logprobs.begin());
  }
  if (!out.top_logprobs.empty()) {
    head.top_logprobs.push_back(std::move(out.top_logprobs.front()));
    out.top_logprobs.erase(out.top_logprobs.begin());
  }
  return {std::move(head), std::move(out)};
}

const char* EndpointOf(ApiKind kind) {
  return kind == ApiKind::kCompletion ? "/v1/completions" : "/v1/chat/completions";
}

// Whether a request resumes from P's first token (kv_transfer_params.first_token_id).
bool ResumesFromFirstToken(const OpenAiRequest& r) {
  return r.kv_transfer_params && r.kv_transfer_params->do_remote_prefill &&
         r.kv_transfer_params->first_token.has_value();
}

}  // namespace

struct OpenAiServer::Impl {
  ServerOptions options;
  GenerationService* service;
  ServerMetrics* metrics;
  std::unique_ptr<httplib::Server> http;                 // plain or TLS (MakeHttpServer)
  std::shared_ptr<http::ConnectionThreads> connections;  // its task queue
  std::unique_ptr<http::RequestDeadline> deadline;       // for reading each request
  std::optional<ChatTemplate> chat;                      // set by Start()
  size_t max_prompt_bytes = 0;                           // set by Start(): engine::MaxPromptBytes
  std::thread thread;
  int bound_port = 0;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{0};

  // Every route `serve` answers, each behind the request deadline.
  void InstallRoutes(httplib::Server& http);

  void Reply(httplib::Response& res, const std::string& endpoint, int status,
             const std::string& body, const char* content_type = "application/json") {
    res.status = status;
    res.set_content(body, content_type);
    metrics->OnHttpResponse(endpoint, status);
  }
  void ReplyError(httplib::Response& res, const std::string& endpoint, const Status& s,
                  const std::string& param = "") {
    Reply(res, endpoint, HttpStatusFor(s.code()), OpenAiErrorBody(s, param));
  }

  // Feeds one engine output into the request. A resumed request's first token is absorbed on
  // its own and its delta dropped (P's answer carried it); returns the delta of the rest.
  ChoiceOutput Absorb(Inflight& st, const engine::RequestOutput& out) {
    if (!st.first_token_pending || out.new_token_ids.empty()) return AbsorbOne(st, out);
    st.first_token_pending = false;
    auto [head, rest] = SplitFirstToken(out);
    AbsorbOne(st, head);
    if (rest.new_token_ids.empty() && !rest.finished) return ChoiceOutput{};
    return AbsorbOne(st, rest);
  }

  // Feeds one engine output into the request: metrics, assembler. Returns the delta.
  ChoiceOutput AbsorbOne(Inflight& st, const engine::RequestOutput& out) {
    if (!out.new_token_ids.empty()) {
      if (!st.got_first_token) {
        metrics->OnFirstToken(SecondsSince(st.arrival));
        st.got_first_token = true;
      } else {
        metrics->OnNextTokens(SecondsSince(st.last_token));
      }
      st.last_token = Clock::now();
    }
    if (out.finished || out.num_prompt_tokens > 0) {
      st.prompt_tokens = std::max(st.prompt_tokens, out.num_prompt_tokens);
      st.cached_tokens = std::max(st.cached_tokens, out.num_cached_tokens);
    }
    if (out.kv_transfer_params) st.kv.params = out.kv_transfer_params;
    if (out.kv_load) st.kv.load = out.kv_load;
    const bool head_for_decoder = st.prefill_leg && out.finished &&
                                  out.finish_reason == engine::FinishReason::kLength &&
                                  out.kv_transfer_params && out.kv_transfer_params->first_token;
    ChoiceOutput delta =
        head_for_decoder ? st.assembler->AddAsStreamHead(out) : st.assembler->Add(out);
    if (st.assembler->finished() && !st.done) {
      st.done = true;
      if (!out.finished) service->Abort(st.engine_request_id);  // a stop string matched
      metrics->OnRequestFinished(delta.finish_reason, st.prompt_tokens,
                                 st.assembler->num_generated_tokens(), SecondsSince(st.arrival));
    }
    return delta;
  }

  Usage UsageOf(const Inflight& st) const {
    return Usage{st.prompt_tokens, st.assembler->num_generated_tokens(), st.cached_tokens};
  }

  // The prompt's ids: a completion's text, or a chat rendered with the chat template.
  StatusOr<std::vector<int32_t>> EncodePrompt(const OpenAiRequest& r) const {
    const tokenizer::Tokenizer& tok = service->tokenizer();
    if (r.kind == ApiKind::kCompletion) {
      KVF_RETURN_IF_ERROR(CheckPromptBytes(r.prompt_text.size()));
      return tok.Encode(r.prompt_text, r.add_special_tokens.value_or(true));
    }
    KVF_ASSIGN_OR_RETURN(std::string text, chat->Render(r));
    KVF_RETURN_IF_ERROR(CheckPromptBytes(text.size()));
    return tok.Encode(text, chat->AddSpecialTokens(r));
  }

  Status CheckPromptBytes(size_t bytes) const {
    return engine::CheckPromptBytes(bytes, max_prompt_bytes, service->max_model_len());
  }

  static Status ErrorOf(const engine::RequestOutput& out) {
    if (!out.error.ok()) return out.error;
    return InternalError("request failed: " + std::string(FinishReasonName(out.finish_reason)));
  }

  // A refusal before the request reaches the engine: its status and the request field it
  // names (OpenAI's "param"; empty: none).
  struct Refusal {
    Status status;
    std::string param{};  // empty: the refusal names no field
  };

  // parse -> validate -> submit -> respond, each below.
  void HandleGenerate(ApiKind kind, const httplib::Request& req, httplib::Response& res);
  // POST /tokenize (vLLM's): a completion's prompt or a chat's messages, as token ids.
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  // The body as a request for the served model (refused while draining).
  std::optional<Refusal> Parse(ApiKind kind, const std::string& body, OpenAiRequest* out) const;
  // The prompt's ids into `tokens`, checked against the model's limits (prompt_limits.h);
  // max_tokens defaulted to what the context leaves when the client did not set it.
  std::optional<Refusal> Validate(OpenAiRequest& r, std::vector<int32_t>* tokens) const;
  // Hands the request to the engine; its answer's X-Request-Id goes on `res`.
  std::shared_ptr<Inflight> Submit(const httplib::Request& req, OpenAiRequest r,
                                   std::vector<int32_t> tokens, Clock::time_point arrival,
                                   httplib::Response& res);
  // The answer, from the first output on: an error status, a stream, or the whole answer.
  void Respond(std::shared_ptr<Inflight> st, bool stream, httplib::Response& res);
  void ReplyWhole(Inflight& st, engine::RequestOutput first, httplib::Response& res);
  void Stream(std::shared_ptr<Inflight> st, engine::RequestOutput first, httplib::Response& res);
};

void OpenAiServer::Impl::HandleGenerate(ApiKind kind, const httplib::Request& req,
                                        httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const std::string endpoint = EndpointOf(kind);
  OpenAiRequest r;
  std::vector<int32_t> tokens;
  std::optional<Refusal> refused = Parse(kind, req.body, &r);
  if (!refused) refused = Validate(r, &tokens);
  if (refused) return ReplyError(res, endpoint, refused->status, refused->param);
  const bool stream = r.stream;
  std::shared_ptr<Inflight> st = Submit(req, std::move(r), std::move(tokens), arrival, res);
  Respond(std::move(st), stream, res);
}

void OpenAiServer::Impl::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  const bool chat = nlohmann::json::parse(req.body, nullptr, false).contains("messages");
  OpenAiRequest r;
  std::vector<int32_t> tokens;
  std::optional<Refusal> refused =
      Parse(chat ? ApiKind::kChat : ApiKind::kCompletion, req.body, &r);
  if (!refused && r.prompt_is_tokens) tokens = r.prompt_token_ids;
  if (!refused && !r.prompt_is_tokens) {
    StatusOr<std::vector<int32_t>> encoded = EncodePrompt(r);
    if (!encoded.ok()) refused = Refusal{encoded.status(), chat ? "messages" : "prompt"};
    if (encoded.ok()) tokens = std::move(encoded).value();
  }
  if (refused) return ReplyError(res, "/tokenize", refused->status, refused->param);
  const nlohmann::json body = {
      {"count", tokens.size()}, {"max_model_len", service->max_model_len()}, {"tokens", tokens}};
  Reply(res, "/tokenize", 200, body.dump());
}

std::optional<OpenAiServer::Impl::Refusal> OpenAiServer::Impl::Parse(ApiKind kind,
                                                                     const std::string& body,
                                                                     OpenAiRequest* out) const {
  if (draining.load()) return Refusal{UnavailableError("server is shutting down")};
  auto parsed = ParseOpenAiRequest(kind, body);
  if (!parsed.ok()) return Refusal{parsed.status()};
  if (!parsed->model.empty() && parsed->model != options.served_model_name) {
    return Refusal{NotFoundError("The model `" + parsed->model + "` does not exist."), "model"};
  }
  *out = std::move(parsed).value();
  return std::nullopt;
}

std::optional<OpenAiServer::Impl::Refusal> OpenAiServer::Impl::Validate(
    OpenAiRequest& r, std::vector<int32_t>* tokens) const {
  const char* prompt_param = r.kind == ApiKind::kChat ? "messages" : "prompt";
  if (r.prompt_is_tokens) {
    *tokens = r.prompt_token_ids;
  } else {
    StatusOr<std::vector<int32_t>> encoded = EncodePrompt(r);
    if (!encoded.ok()) return Refusal{encoded.status(), prompt_param};
    *tokens = std::move(encoded).value();
  }
  // The engine's own check (it refuses the same prompts), against the tokenizer's vocabulary:
  // ids a model pads its embedding with are no prompt a client may send.
  const int32_t max_len = service->max_model_len();
  Status prompt = engine::CheckPrompt(*tokens, service->tokenizer().vocab_size(), max_len);
  if (!prompt.ok()) return Refusal{std::move(prompt), prompt_param};
  const int32_t n = static_cast<int32_t>(tokens->size());
  if (!r.max_tokens_set) {
    r.params.max_tokens =
        r.kind == ApiKind::kChat ? max_len - n : std::min(options.default_max_tokens, max_len - n);
  }
  Status length = engine::CheckRequestLength(n, r.params.max_tokens, max_len);
  if (!length.ok()) return Refusal{std::move(length), "max_tokens"};
  Status valid = r.params.Validate();
  if (!valid.ok()) return Refusal{std::move(valid)};
  return std::nullopt;
}

std::shared_ptr<Inflight> OpenAiServer::Impl::Submit(const httplib::Request& req, OpenAiRequest r,
                                                     std::vector<int32_t> tokens,
                                                     Clock::time_point arrival,
                                                     httplib::Response& res) {
  auto st = std::make_shared<Inflight>();
  const uint64_t seq = next_id.fetch_add(1);
  std::string base = req.get_header_value("X-Request-Id");
  if (base.empty()) base = std::to_string(UnixSeconds()) + "-" + std::to_string(seq);
  st->engine_request_id = base + "#" + std::to_string(seq);
  st->header.kind = r.kind;
  st->header.id = (r.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + base;
  st->header.created = UnixSeconds();
  st->header.model = options.served_model_name;
  st->header.logprobs = r.logprobs;
  st->header.return_token_ids = r.return_token_ids;
  if (r.return_token_ids) st->header.prompt_token_ids = tokens;
  st->endpoint = EndpointOf(r.kind);
  st->include_usage = r.include_usage;
  st->prompt_tokens = static_cast<int32_t>(tokens.size());
  st->arrival = arrival;
  st->deadline = Deadline::AfterMs(options.request_timeout_ms);
  st->assembler =
      std::make_unique<OutputAssembler>(&service->tokenizer(), r.logprobs, std::move(r.stop));
  st->prefill_leg = r.kv_transfer_params && r.kv_transfer_params->do_remote_decode;
  st->resumed = ResumesFromFirstToken(r);
  st->first_token_pending = st->resumed;

  GenerateRequest greq;
  greq.request_id = st->engine_request_id;
  greq.prompt_token_ids = std::move(tokens);
  greq.params = r.params;
  greq.kv_transfer_params = std::move(r.kv_transfer_params);
  st->channel = service->Submit(std::move(greq));
  res.set_header("X-Request-Id", base);
  return st;
}

void OpenAiServer::Impl::Respond(std::shared_ptr<Inflight> st, bool stream,
                                 httplib::Response& res) {
  // The first output decides the status code: engine refusals become 4xx/5xx, not a stream.
  const Deadline first_deadline =
      Deadline::AfterMs(std::min(options.first_output_timeout_ms, st->deadline.RemainingMs()));
  auto first = st->channel->Pop(first_deadline);
  if (!first.ok()) {
    service->Abort(st->engine_request_id);
    return ReplyError(res, st->endpoint, first.status());
  }
  if (first->finished && first->finish_reason == engine::FinishReason::kError) {
    metrics->OnRequestFinished("error", st->prompt_tokens, 0, SecondsSince(st->arrival));
    return ReplyError(res, st->endpoint, ErrorOf(*first));
  }
  if (stream) return Stream(std::move(st), std::move(first).value(), res);
  ReplyWhole(*st, std::move(first).value(), res);
}

void OpenAiServer::Impl::ReplyWhole(Inflight& st, engine::RequestOutput out,
                                    httplib::Response& res) {
  while (true) {
    Absorb(st, out);
    if (st.assembler->finished()) break;
    auto next = st.channel->Pop(st.deadline);
    if (!next.ok()) {
      service->Abort(st.engine_request_id);
      return ReplyError(res, st.endpoint, next.status());
    }
    out = std::move(next).value();
    if (out.finished && out.finish_reason == engine::FinishReason::kError) {
      metrics->OnRequestFinished("error", st.prompt_tokens, st.assembler->num_generated_tokens(),
                                 SecondsSince(st.arrival));
      return ReplyError(res, st.endpoint, ErrorOf(out));
    }
  }
  Reply(res, st.endpoint, 200,
        FormatResponse(st.header, st.assembler->total(), UsageOf(st), st.kv));
}

void OpenAiServer::Impl::Stream(std::shared_ptr<Inflight> st, engine::RequestOutput first,
                                httplib::Response& res) {
  metrics->OnHttpResponse(st->endpoint, 200);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto pending = std::make_shared<std::optional<engine::RequestOutput>>(std::move(first));
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, pending](size_t /*offset*/, httplib::DataSink& sink) {
        bool first_chunk = !st->resumed;  // resumed: the proxy sent the first chunk (P's)
        auto write = [&sink](const std::string& s) { return sink.write(s.data(), s.size()); };
        while (true) {
          engine::RequestOutput out;
          if (pending->has_value()) {
            out = std::move(**pending);
            pending->reset();
          } else {
            auto next = st->channel->Pop(st->deadline);
            if (!next.ok()) {
              service->Abort(st->engine_request_id);
              write(FormatStreamError(OpenAiErrorBody(next.status())));
              write(std::string(kStreamDone));
              sink.done();
              return true;
            }
            out = std::move(next).value();
          }
          if (out.finished && out.finish_reason == engine::FinishReason::kError) {
            st->done = true;
            metrics->OnRequestFinished("error", st->prompt_tokens,
                                       st->assembler->num_generated_tokens(),
                                       SecondsSince(st->arrival));
            write(FormatStreamError(OpenAiErrorBody(ErrorOf(out))));
            write(std::string(kStreamDone));
            sink.done();
            return true;
          }
          ChoiceOutput delta = Absorb(*st, out);
          const bool finished = st->assembler->finished();
          if (first_chunk || finished || !delta.text.empty() || !delta.token_ids.empty()) {
            if (!write(FormatStreamChunk(st->header, delta, first_chunk,
                                         finished ? st->kv : KvHandoff{}))) {
              return false;  // client gone: the releaser aborts the request
            }
            first_chunk = false;
          }
          if (finished) {
            if (st->include_usage && !write(FormatUsageChunk(st->header, UsageOf(*st)))) {
              return false;
            }
            write(std::string(kStreamDone));
            sink.done();
            return true;
          }
        }
      },
      [this, st](bool /*success*/) {
        if (!st->done) {
          KVF_LOG_INFO("client of {} went away; aborting", st->engine_request_id);
          service->Abort(st->engine_request_id);
          st->done = true;
          metrics->OnRequestFinished("abort", st->prompt_tokens,
                                     st->assembler->num_generated_tokens(),
                                     SecondsSince(st->arrival));
        }
      });
}

void OpenAiServer::Impl::InstallRoutes(httplib::Server& http) {
  http::RequestDeadline& arrived = *deadline;
  http.Post("/v1/completions",
            arrived.Guard([this](const httplib::Request& req, httplib::Response& res) {
              HandleGenerate(ApiKind::kCompletion, req, res);
            }));
  http.Post("/v1/chat/completions",
            arrived.Guard([this](const httplib::Request& req, httplib::Response& res) {
              HandleGenerate(ApiKind::kChat, req, res);
            }));
  http.Post("/tokenize", arrived.Guard([this](const httplib::Request& req, httplib::Response& res) {
    HandleTokenize(req, res);
  }));
  http.Get("/v1/models", arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json model = {
        {"id", options.served_model_name},   {"object", "model"},
        {"created", UnixSeconds()},          {"owned_by", "kvferry"},
        {"root", options.served_model_name}, {"max_model_len", service->max_model_len()}};
    Reply(res, "/v1/models", 200, nlohmann::json{{"object", "list"}, {"data", {model}}}.dump());
  }));
  const std::string openapi = http::OpenApiDocument(
      {.vocab_size = service->tokenizer().vocab_size(), .max_model_len = service->max_model_len()});
  http.Get("/openapi.json",
           arrived.Guard([openapi](const httplib::Request&, httplib::Response& res) {
             res.set_content(openapi, "application/json");
           }));
  http.Get("/health", arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
    const bool ok = service->healthy() && !draining.load();
    Reply(res, "/health", ok ? 200 : 503, "", "text/plain");
  }));
  http.Get("/metrics", arrived.Guard([this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(metrics->Render() + http::ConnectionMetricsText(connections->load()) +
                        http::RequestDeadlineMetricsText(*deadline),
                    "text/plain; version=0.0.4");
  }));
}

OpenAiServer::OpenAiServer(ServerOptions options, GenerationService* service,
                           ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->service = service;
  impl_->metrics = metrics;
}

OpenAiServer::~OpenAiServer() { Stop(); }

Status OpenAiServer::Start() {
  Impl* impl = impl_.get();
  impl->max_prompt_bytes =
      engine::MaxPromptBytes(impl->service->tokenizer(), impl->service->max_model_len());
  KVF_ASSIGN_OR_RETURN(
      impl->chat, ChatTemplate::Create(impl->options.chat_template, impl->service->tokenizer()));
  KVF_ASSIGN_OR_RETURN(impl->http, http::MakeHttpServer(impl->options.tls));
  httplib::Server& http = *impl->http;
  KVF_RETURN_IF_ERROR(http::RequireApiKeys(
      http, impl->options.api_keys,
      [impl](const std::string& path) { impl->metrics->OnHttpResponse(RouteLabel(path), 401); }));
  impl->connections = std::make_shared<http::ConnectionThreads>(impl->options.max_connections);
  http.new_task_queue = [q = impl->connections] { return http::ConnectionThreads::Handle(q); };
  impl->deadline = std::make_unique<http::RequestDeadline>(http::RequestDeadline::Options{
      .timeout = std::chrono::milliseconds(impl->options.request_read_timeout_ms),
      .plaintext = !impl->options.tls.enabled()});
  impl->deadline->Install(http);
  http.set_payload_max_length(64u << 20);
  http.set_tcp_nodelay(true);
  impl->InstallRoutes(http);
  http::InstallErrorHandler(http, Routes());

  KVF_ASSIGN_OR_RETURN(impl->bound_port, StartHttpListener(http, impl->options.host,
                                                           impl->options.port, &impl->thread));
  impl->connections->SetListenPort(impl->bound_port);
  impl->deadline->Start(impl->bound_port);
  return Status::Ok();
}

int OpenAiServer::port() const { return impl_->bound_port; }

void OpenAiServer::BeginDrain() { impl_->draining = true; }

void OpenAiServer::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->http->stop();
  impl_->thread.join();
  impl_->deadline->Stop();
}

}  // namespace kvferry::server
