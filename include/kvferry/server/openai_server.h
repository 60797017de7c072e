// OpenAiServer: the HTTP front of `kvferry serve` (docs/serving.md).
//
//   POST /v1/completions, /v1/chat/completions   (stream: true -> server-sent events)
//   GET  /v1/models, /health, /metrics
//
// Each request is parsed (openai_protocol.h), tokenized, checked against the context length,
// submitted to the GenerationService and answered from its OutputChannel. Errors are OpenAI JSON
// bodies with the code from http_error.h. A streaming client that disconnects has its request
// aborted (its blocks are freed by the engine). While draining (BeginDrain) new generation
// requests get 503 and /health answers 503. With API keys, a request without a valid one is
// answered 401 before routing (http/api_key.h); with a certificate, it listens with TLS
// (http/tls_server.h).
//
// Thread-safety: Start/Stop from one controlling thread; handlers run on the server's own pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvferry/common/status.h"
#include "kvferry/http/api_key.h"
#include "kvferry/http/tls_server.h"
#include "kvferry/server/generation_service.h"
#include "kvferry/server/server_metrics.h"

namespace kvferry::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: an ephemeral port, see OpenAiServer::port()
  std::string served_model_name = "tiny";
  int max_connections = 1024;  // served at once, a thread each (http/connection_threads.h)
  int64_t request_read_timeout_ms =
      30000;                            // a request's headers and body (http/request_deadline.h)
  int64_t request_timeout_ms = 600000;  // a generation request's whole life
  int64_t first_output_timeout_ms = 300000;  // wait for the first output (queueing, remote KV)
  int32_t default_max_tokens = 16;           // completions without max_tokens (OpenAI's default)
  // --chat-template: a file or the template text ("": the model's own, server/chat_template.h).
  std::string chat_template;
  http::ApiKeyOptions api_keys;  // none: open
  http::TlsServerFiles tls;      // none: plain HTTP
};

class OpenAiServer {
 public:
  // `service` and `metrics` must outlive the server.
  OpenAiServer(ServerOptions options, GenerationService* service, ServerMetrics* metrics);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Loads the chat template, binds and starts serving on a background thread. InvalidArgument /
  // NotFound for a chat template that does not parse or read, InvalidArgument for unusable TLS
  // files or API keys; Unavailable when the address cannot be bound.
  Status Start();
  int port() const;
  // Stop accepting generation requests (503); in-flight ones continue.
  void BeginDrain();
  // Stops the listener and joins the serving thread (in-flight handlers finish first).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvferry::server
