// FakeInstance (tests only): an OpenAiServer on an ephemeral loopback port in front of a
// FakeGenerationService — an upstream that answers like `kvferry serve` without a model, for the
// proxy's tests. `options` may add API keys or TLS; the port is always ephemeral;
// `token_interval_ms` paces the fake's tokens.
//
// Thread-safety: as OpenAiServer; `fake` records what reached the engine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kvferry/server/openai_server.h"
#include "server/testing/fake_generation_service.h"

namespace kvferry::server::testing {

struct FakeInstance {
  explicit FakeInstance(ServerOptions options = {}, int token_interval_ms = 1)
      : tls(options.tls.enabled()), fake(token_interval_ms) {
    options.port = 0;
    server = std::make_unique<OpenAiServer>(options, &fake, &metrics);
    EXPECT_TRUE(server->Start().ok());
  }
  std::string url() const {
    return (tls ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(server->port());
  }
  const bool tls;
  ServerMetrics metrics;
  FakeGenerationService fake;
  std::unique_ptr<OpenAiServer> server;
};

}  // namespace kvferry::server::testing
