// How Python turns values into text, as Jinja2 output depends on it byte for byte: str() (what
// `{{ x }}` and `~` print), repr() (how lists and dicts print their items), float repr (the
// shortest round-trip digits, "1e-05", "1e+16", "2.0") and json.dumps (the `tojson` filter as
// Hugging Face defines it: ensure_ascii=False, insertion order, optional indent).
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>

#include "jinja/value.h"
#include "kvferry/common/status.h"

namespace kvferry::jinja {

// Python's repr(float): "1.0", "0.1", "1e-05", "1e+16", "inf", "nan".
std::string FloatRepr(double d);

// Python's str(): strings as they are, None as "None", True/False, Undefined as "".
std::string ToPyStr(const Value& v);

// Python's repr(): strings quoted and escaped ('a', "it's"), containers with their items'
// reprs. Containers nested deeper than kMaxNesting print as "...".
std::string PyRepr(const Value& v);

// The options of json.dumps that HF's tojson passes through.
struct JsonOptions {
  // None: one line with ", " and ": "; an indent: newlines, ",", ": ".
  std::optional<std::string> indent;
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool ensure_ascii = false;
  bool sort_keys = false;
};

// json.dumps(v, ...). Fails, as Python's TypeError, on values JSON cannot hold (Undefined,
// namespaces, callables, iterators) and on nesting deeper than kMaxNesting.
StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options);

}  // namespace kvferry::jinja
