// The HTTP edge's one mapping from kvferry::Status to an HTTP status code and an OpenAI-style
// error body. Used by the server and the proxy alike.
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": 400}}
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "kvferry/common/status.h"

namespace kvferry::http {

// InvalidArgument/OutOfRange/FailedPrecondition 400, Unauthenticated 401, NotFound 404,
// AlreadyExists/Aborted 409, ResourceExhausted 429, Unimplemented 501, Unavailable 503,
// DeadlineExceeded 504, DataLoss/Internal 500. OK maps to 200.
int HttpStatusFor(StatusCode code);

// OpenAI error "type" for an HTTP status: invalid_request_error, not_found_error, ...
const char* OpenAiErrorType(int http_status);

// The JSON error body for `status` (not OK), with code HttpStatusFor(status.code()).
// `param` names the offending request field, or is empty.
std::string OpenAiErrorBody(const Status& status, const std::string& param = "");

// Same, with an explicit HTTP status (for errors that do not come from a Status).
std::string OpenAiErrorBody(int http_status, const std::string& message,
                            const std::string& param = "");

}  // namespace kvferry::http
