// The OpenAPI 3.0 document of what `kvferry serve` and `kvferry proxy` accept, served at
// GET /openapi.json by both (docs/reliability.md, "HTTP against a generator"): the OpenAI
// completion and chat requests with every field, type and bound the request parser enforces
// (server/openai_protocol.h), the responses each endpoint can give (every 4xx/5xx an OpenAI error
// body), /v1/models, /health, /metrics, and the proxy's /cluster. A property-based client
// (schemathesis, in CI) generates requests from it and checks the answers against it.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

namespace kvferry::http {

struct OpenApiFront {
  bool proxy = false;         // adds /cluster; the model's bounds are its instances'
  int32_t vocab_size = 0;     // > 0: prompt token ids are below it (serve)
  int32_t max_model_len = 0;  // > 0: max_tokens is below it (serve)
};

std::string OpenApiDocument(const OpenApiFront& front);

}  // namespace kvferry::http
