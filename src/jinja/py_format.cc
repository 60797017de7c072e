#include "jinja/py_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

// The shortest round-trip digits of finite, non-zero |d| and its decimal exponent:
// |d| = 0.D1D2... x 10^(exponent + 1), i.e. D1.D2... x 10^exponent.
void ShortestDigits(double d, std::string* digits, int* exponent) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  std::string_view s(buf, res.ptr - buf);
  const size_t e = s.find('e');
  digits->clear();
  for (char c : s.substr(0, e)) {
    if (c != '.') digits->push_back(c);
  }
  *exponent = 0;
  std::from_chars(s.data() + e + (s[e + 1] == '+' ? 2 : 1), s.data() + s.size(), *exponent);
}

void AppendHex(uint32_t v, int width, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*x", width, v);
  out->append(buf);
}

void AppendStringRepr(const std::string& s, std::string* out) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out->push_back(quote);
  for (char32_t cp : utf8::Decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out->append("\\n");
    } else if (cp == '\r') {
      out->append("\\r");
    } else if (cp == '\t') {
      out->append("\\t");
    } else if (utf8::IsPrintable(cp)) {
      utf8::Append(cp, out);
    } else if (cp < 0x100) {
      out->append("\\x");
      AppendHex(cp, 2, out);
    } else if (cp < 0x10000) {
      out->append("\\u");
      AppendHex(cp, 4, out);
    } else {
      out->append("\\U");
      AppendHex(cp, 8, out);
    }
  }
  out->push_back(quote);
}

void AppendRepr(const Value& v, int depth, std::string* out);

void AppendItems(const std::vector<Value>& items, int depth, std::string* out) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->append(", ");
    AppendRepr(items[i], depth + 1, out);
  }
}

void AppendDictRepr(const Dict& d, int depth, std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [k, item] : d.entries()) {
    if (!first) out->append(", ");
    first = false;
    AppendStringRepr(k, out);
    out->append(": ");
    AppendRepr(item, depth + 1, out);
  }
  out->push_back('}');
}

void AppendRepr(const Value& v, int depth, std::string* out) {
  using K = Value::Kind;
  if (depth > kMaxNesting) {
    out->append("...");
    return;
  }
  switch (v.kind()) {
    case K::kUndefined:
      out->append("Undefined");
      return;
    case K::kString:
      if (v.is_markup()) out->append("Markup(");
      AppendStringRepr(v.as_string(), out);
      if (v.is_markup()) out->push_back(')');
      return;
    case K::kList:
      if (v.seq_kind() == SeqKind::kIterator) {
        out->append("<generator object>");
      } else if (v.seq_kind() == SeqKind::kTuple) {
        out->push_back('(');
        AppendItems(v.items(), depth, out);
        if (v.items().size() == 1) out->push_back(',');
        out->push_back(')');
      } else {
        out->push_back('[');
        AppendItems(v.items(), depth, out);
        out->push_back(']');
      }
      return;
    case K::kDict:
      AppendDictRepr(v.as_dict(), depth, out);
      return;
    case K::kNamespace:
      out->append("<Namespace ");
      AppendDictRepr(v.as_namespace().attrs, depth, out);
      out->push_back('>');
      return;
    case K::kCallable:
      out->append("<function " + v.as_callable().name + ">");
      return;
    default:
      out->append(ToPyStr(v));
      return;
  }
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t cp : utf8::Decode(s)) {
    switch (cp) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {  // a surrogate pair, as Python writes astral code points
        const char32_t v = cp - 0x10000;
        out->append("\\u");
        AppendHex(0xD800 + (v >> 10), 4, out);
        out->append("\\u");
        AppendHex(0xDC00 + (v & 0x3FF), 4, out);
      } else {
        out->append("\\u");
        AppendHex(cp, 4, out);
      }
    } else {
      utf8::Append(cp, out);
    }
  }
  out->push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& o) : o_(o) {
    item_sep_ = o.item_separator.value_or(o.indent ? "," : ", ");
    key_sep_ = o.key_separator.value_or(": ");
  }

  Status Write(const Value& v, int level, std::string* out) {
    if (level > kMaxNesting) {
      return InvalidArgumentError("tojson: value nests deeper than " + std::to_string(kMaxNesting));
    }
    switch (v.kind()) {
      case Value::Kind::kNone:
        out->append("null");
        return Status::Ok();
      case Value::Kind::kBool:
        out->append(v.as_bool() ? "true" : "false");
        return Status::Ok();
      case Value::Kind::kInt:
        out->append(std::to_string(v.as_int()));
        return Status::Ok();
      case Value::Kind::kFloat:
        WriteFloat(v.as_float(), out);
        return Status::Ok();
      case Value::Kind::kString:
        AppendJsonString(v.as_string(), o_.ensure_ascii, out);
        return Status::Ok();
      case Value::Kind::kList:
        if (v.seq_kind() != SeqKind::kIterator) return WriteList(v.items(), level, out);
        break;
      case Value::Kind::kDict:
        return WriteDict(v.as_dict(), level, out);
      default:
        break;
    }
    return InvalidArgumentError("Object of type " + v.TypeName() + " is not JSON serializable");
  }

 private:
  static void WriteFloat(double d, std::string* out) {
    if (std::isnan(d)) {
      out->append("NaN");
    } else if (std::isinf(d)) {
      out->append(d > 0 ? "Infinity" : "-Infinity");
    } else {
      out->append(FloatRepr(d));
    }
  }

  void NewLine(int level, std::string* out) const {
    if (!o_.indent) return;
    out->push_back('\n');
    for (int i = 0; i < level; ++i) out->append(*o_.indent);
  }

  Status WriteList(const std::vector<Value>& items, int level, std::string* out) {
    if (items.empty()) {
      out->append("[]");
      return Status::Ok();
    }
    out->push_back('[');
    NewLine(level + 1, out);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) {
        out->append(item_sep_);
        NewLine(level + 1, out);
      }
      KVF_RETURN_IF_ERROR(Write(items[i], level + 1, out));
    }
    NewLine(level, out);
    out->push_back(']');
    return Status::Ok();
  }

  Status WriteDict(const Dict& d, int level, std::string* out) {
    if (d.empty()) {
      out->append("{}");
      return Status::Ok();
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : d.entries()) entries.push_back(&e);
    if (o_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out->push_back('{');
    NewLine(level + 1, out);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out->append(item_sep_);
        NewLine(level + 1, out);
      }
      AppendJsonString(entries[i]->first, o_.ensure_ascii, out);
      out->append(key_sep_);
      KVF_RETURN_IF_ERROR(Write(entries[i]->second, level + 1, out));
    }
    NewLine(level, out);
    out->push_back('}');
    return Status::Ok();
  }

  const JsonOptions& o_;
  std::string item_sep_;
  std::string key_sep_;
};

}  // namespace

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string out = std::signbit(d) ? "-" : "";
  if (d == 0) return out + "0.0";
  std::string digits;
  int exp = 0;
  ShortestDigits(d, &digits, &exp);
  const int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (n <= exp + 1) {
      out += digits + std::string(exp + 1 - n, '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + buf;
}

std::string ToPyStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return FloatRepr(v.as_float());
    case Value::Kind::kString:
      return v.as_string();
    default:
      return PyRepr(v);
  }
}

std::string PyRepr(const Value& v) {
  std::string out;
  AppendRepr(v, 0, &out);
  return out;
}

StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  KVF_RETURN_IF_ERROR(JsonWriter(options).Write(v, 0, &out));
  return out;
}

}  // namespace kvferry::jinja
