#include "kvferry/http/http_error.h"

#include <nlohmann/json.hpp>

#include "http/json_body.h"

namespace kvferry::http {

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

const char* OpenAiErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 429:
      return "rate_limit_error";
    case 501:
      return "not_implemented_error";
    case 502:
      return "bad_gateway_error";
    case 503:
      return "service_unavailable_error";
    case 504:
      return "timeout_error";
    default:
      return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string OpenAiErrorBody(int http_status, const std::string& message, const std::string& param) {
  nlohmann::json err = {{"message", message},
                        {"type", OpenAiErrorType(http_status)},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", http_status}};
  return JsonBody(nlohmann::json{{"error", err}});
}

std::string OpenAiErrorBody(const Status& status, const std::string& param) {
  return OpenAiErrorBody(HttpStatusFor(status.code()), std::string(status.message()), param);
}

}  // namespace kvferry::http
