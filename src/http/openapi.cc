#include "kvferry/http/openapi.h"

#include <nlohmann/json.hpp>

namespace kvferry::http {
namespace {

using nlohmann::ordered_json;

// What both front ends accept. Fields are optional unless `required`; a null is ignored, as an
// absent field is, and unknown fields are ignored (additionalProperties), as OpenAI servers do.
// Bounds are the parser's (server/openai_request.cc). A `stop` string's bound is 1,024 bytes,
// which JSON Schema cannot say: the document gives 1,024 characters, so that what it refuses is
// refused, and a string of multi-byte characters within it may still be (docs/reliability.md).
constexpr char kDocument[] = R"json({
  "openapi": "3.0.3",
  "info": {"title": "kvferry", "version": "1",
           "description": "OpenAI-compatible completions and chat, as kvferry serves them."},
  "paths": {
    "/v1/completions": {"post": {
      "operationId": "createCompletion",
      "requestBody": {"required": true, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/CompletionRequest"}}}}}},
    "/v1/chat/completions": {"post": {
      "operationId": "createChatCompletion",
      "requestBody": {"required": true, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ChatRequest"}}}}}},
    "/v1/models": {"get": {
      "operationId": "listModels",
      "responses": {
        "200": {"description": "The served model.", "content": {"application/json": {"schema": {
          "type": "object", "required": ["object", "data"],
          "properties": {"object": {"type": "string"}, "data": {"type": "array", "items": {
            "type": "object", "required": ["id", "object"],
            "properties": {"id": {"type": "string"}, "object": {"type": "string"}}}}}}}}},
        "401": {"$ref": "#/components/responses/Error"},
        "502": {"$ref": "#/components/responses/Error"},
        "503": {"$ref": "#/components/responses/Error"}}}},
    "/health": {"get": {
      "operationId": "health",
      "responses": {"200": {"description": "Serving."},
                    "503": {"description": "Not serving (unhealthy, or draining)."}}}},
    "/metrics": {"get": {
      "operationId": "metrics",
      "responses": {"200": {"description": "Prometheus text exposition.",
                            "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
  },
  "components": {
    "responses": {
      "Error": {"description": "An OpenAI error body.", "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/Error"}}}}
    },
    "schemas": {
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "code": {"type": "integer"}, "param": {"type": "string", "nullable": true}}}}},
      "Completion": {"type": "object", "required": ["id", "object", "created", "model", "choices"],
        "properties": {"id": {"type": "string"}, "object": {"type": "string"},
                       "created": {"type": "integer"}, "model": {"type": "string"},
                       "choices": {"type": "array", "items": {"type": "object",
                         "required": ["index", "finish_reason"],
                         "properties": {"index": {"type": "integer"},
                                        "finish_reason": {"type": "string", "nullable": true}}}},
                       "usage": {"type": "object", "properties": {
                         "prompt_tokens": {"type": "integer"},
                         "completion_tokens": {"type": "integer"},
                         "total_tokens": {"type": "integer"}}}}},
      "TokenIds": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
      "Sampling": {"type": "object", "properties": {
        "model": {"type": "string", "nullable": true},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2147483647, "nullable": true},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1000000, "nullable": true},
        "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1,
                  "nullable": true},
        "top_k": {"type": "integer", "minimum": -1, "maximum": 2147483647, "nullable": true},
        "seed": {"type": "integer", "nullable": true},
        "n": {"type": "integer", "minimum": 1, "maximum": 1, "nullable": true},
        "stream": {"type": "boolean", "nullable": true},
        "stream_options": {"type": "object", "nullable": true,
                           "properties": {"include_usage": {"type": "boolean", "nullable": true}}},
        "stop": {"nullable": true, "oneOf": [
          {"type": "string", "maxLength": 1024},
          {"type": "array", "maxItems": 16, "items": {"type": "string", "maxLength": 1024}}]},
        "stop_token_ids": {"type": "array", "maxItems": 1024, "nullable": true,
                           "items": {"type": "integer", "minimum": 0}},
        "ignore_eos": {"type": "boolean", "nullable": true},
        "return_token_ids": {"type": "boolean", "nullable": true},
        "add_special_tokens": {"type": "boolean", "nullable": true},
        "kv_transfer_params": {"type": "object", "nullable": true,
          "description": "P/D hand-off record (vLLM's field names); a request to a P carries {\"do_remote_decode\": true}."}}},
      "CompletionRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {
        "type": "object", "required": ["prompt"], "properties": {
          "prompt": {"oneOf": [
            {"type": "string", "minLength": 1},
            {"$ref": "#/components/schemas/TokenIds"},
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "string", "minLength": 1}},
            {"type": "array", "minItems": 1, "maxItems": 1, "items": {"$ref": "#/components/schemas/TokenIds"}}]},
          "logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true}}}]},
      "ChatRequest": {"allOf": [{"$ref": "#/components/schemas/Sampling"}, {
        "type": "object", "required": ["messages"], "properties": {
          "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role"],
            "properties": {"role": {"type": "string"}, "content": {"nullable": true, "oneOf": [
              {"type": "string"},
              {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}}}]}}}},
          "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": 2147483647,
                                    "nullable": true},
          "logprobs": {"type": "boolean", "nullable": true},
          "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true},
          "tools": {"type": "array", "nullable": true, "items": {"type": "object"}},
          "chat_template_kwargs": {"type": "object", "nullable": true},
          "add_generation_prompt": {"type": "boolean", "nullable": true}}}]}
    }
  }
})json";

// The answers of both generation endpoints (OpenAPI has no reference for a whole set).
constexpr char kGenerateResponses[] = R"json({
  "200": {"description": "The completion (a server-sent-event stream when stream is true).",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Completion"}},
                      "text/event-stream": {"schema": {}}}},
  "400": {"$ref": "#/components/responses/Error"},
  "401": {"$ref": "#/components/responses/Error"},
  "404": {"$ref": "#/components/responses/Error"},
  "413": {"$ref": "#/components/responses/Error"},
  "503": {"$ref": "#/components/responses/Error"},
  "504": {"$ref": "#/components/responses/Error"}})json";

// kvferry serve only: vLLM's /tokenize.
constexpr char kTokenize[] = R"json({"post": {
  "operationId": "tokenize",
  "requestBody": {"required": true, "content": {"application/json": {"schema": {"anyOf": [
    {"$ref": "#/components/schemas/CompletionRequest"},
    {"$ref": "#/components/schemas/ChatRequest"}]}}}},
  "responses": {
    "200": {"description": "The prompt's token ids.", "content": {"application/json": {"schema": {
      "type": "object", "required": ["count", "max_model_len", "tokens"],
      "properties": {"count": {"type": "integer"}, "max_model_len": {"type": "integer"},
                     "tokens": {"type": "array", "items": {"type": "integer"}}}}}}},
    "400": {"$ref": "#/components/responses/Error"},
    "401": {"$ref": "#/components/responses/Error"},
    "404": {"$ref": "#/components/responses/Error"},
    "413": {"$ref": "#/components/responses/Error"},
    "503": {"$ref": "#/components/responses/Error"}}}})json";

constexpr char kCluster[] = R"json({"get": {
  "operationId": "cluster",
  "responses": {"200": {"description": "The proxy's view of its members.",
                        "content": {"application/json": {"schema": {"type": "object"}}}}}}})json";

}  // namespace

std::string OpenApiDocument(const OpenApiFront& front) {
  ordered_json doc = ordered_json::parse(kDocument);
  ordered_json& schemas = doc["components"]["schemas"];
  if (front.vocab_size > 0) {
    schemas["TokenIds"]["items"]["maximum"] = front.vocab_size - 1;
    schemas["Sampling"]["properties"]["stop_token_ids"]["items"]["maximum"] = front.vocab_size - 1;
  }
  if (front.max_model_len > 0) {
    schemas["TokenIds"]["maxItems"] = front.max_model_len - 1;
    schemas["Sampling"]["properties"]["max_tokens"]["maximum"] = front.max_model_len - 1;
    schemas["ChatRequest"]["allOf"][1]["properties"]["max_completion_tokens"]["maximum"] =
        front.max_model_len - 1;
  }
  ordered_json responses = ordered_json::parse(kGenerateResponses);
  if (front.proxy) {
    doc["info"]["title"] = "kvferry proxy";
    doc["paths"]["/cluster"] = ordered_json::parse(kCluster);
    responses["502"] = {{"$ref", "#/components/responses/Error"}};
  } else {
    doc["paths"]["/tokenize"] = ordered_json::parse(kTokenize);
  }
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    doc["paths"][path]["post"]["responses"] = responses;
  }
  return doc.dump();
}

}  // namespace kvferry::http
