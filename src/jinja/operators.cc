#include "jinja/operators.h"

#include <cmath>
#include <limits>

#include "jinja/methods.h"
#include "jinja/percent_format.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/utf8.h"

namespace kvferry::jinja {
namespace {

Status TypeError(const std::string& msg) { return InvalidArgumentError(msg); }

Status Overflow() { return OutOfRangeError("integer overflow (template integers are 64-bit)"); }

Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return TypeError("unsupported operand type(s) for " + std::string(op) + ": '" + a.TypeName() +
                   "' and '" + b.TypeName() + "'");
}

// Python's divmod for floats (CPython's float_divmod), returning floor quotient and modulo.
void FloatDivMod(double vx, double wx, double* floordiv, double* mod) {
  *mod = std::fmod(vx, wx);
  double div = (vx - *mod) / wx;
  if (*mod != 0) {
    if ((wx < 0) != (*mod < 0)) {
      *mod += wx;
      div -= 1.0;
    }
  } else {
    *mod = std::copysign(0.0, wx);
  }
  if (div != 0) {
    *floordiv = std::floor(div);
    if (div - *floordiv > 0.5) *floordiv += 1.0;
  } else {
    *floordiv = std::copysign(0.0, vx / wx);
  }
}

StatusOr<Value> IntPow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) return InvalidArgumentError("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return Overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
  }
  return Value::Int(result);
}

StatusOr<Value> IntArithmetic(std::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &r)) return Overflow();
  } else if (op == "-") {
    if (__builtin_sub_overflow(a, b, &r)) return Overflow();
  } else if (op == "*") {
    if (__builtin_mul_overflow(a, b, &r)) return Overflow();
  } else if (op == "/") {
    if (b == 0) return InvalidArgumentError("division by zero");
    return Value::Float(static_cast<double>(a) / static_cast<double>(b));
  } else if (op == "//" || op == "%") {
    if (b == 0) return InvalidArgumentError("integer division or modulo by zero");
    if (a == std::numeric_limits<int64_t>::min() && b == -1) {
      if (op == "%") return Value::Int(0);
      return Overflow();
    }
    int64_t q = a / b;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {
      --q;
      m += b;
    }
    r = op == "//" ? q : m;
  } else {
    return IntPow(a, b);
  }
  return Value::Int(r);
}

StatusOr<Value> FloatArithmetic(std::string_view op, double a, double b) {
  if (op == "+") return Value::Float(a + b);
  if (op == "-") return Value::Float(a - b);
  if (op == "*") return Value::Float(a * b);
  if (op == "/") {
    if (b == 0) return InvalidArgumentError("float division by zero");
    return Value::Float(a / b);
  }
  if (op == "//" || op == "%") {
    if (b == 0) {
      return InvalidArgumentError(op == "//" ? "float floor division by zero" : "float modulo");
    }
    double q = 0, m = 0;
    FloatDivMod(a, b, &q, &m);
    return Value::Float(op == "//" ? q : m);
  }
  if (a == 0 && b < 0) return InvalidArgumentError("0.0 cannot be raised to a negative power");
  if (a < 0 && std::isfinite(b) && b != std::floor(b)) {
    return UnimplementedError("complex results of ** are not supported");
  }
  const double r = std::pow(a, b);
  if (std::isinf(r) && std::isfinite(a) && std::isfinite(b)) {
    return OutOfRangeError("(34, 'Numerical result out of range')");
  }
  return Value::Float(r);
}

StatusOr<Value> RepeatString(const Value& str, int64_t n, Budget& budget) {
  const std::string& s = str.as_string();
  auto make = [&str](std::string out) {
    return str.is_markup() ? Value::Markup(std::move(out)) : Value::Str(std::move(out));
  };
  if (n <= 0 || s.empty()) return make("");
  KVF_RETURN_IF_ERROR(budget.CheckProduct(n, s.size()));
  KVF_RETURN_IF_ERROR(budget.Build(s.size() * n));
  std::string out;
  out.reserve(s.size() * n);
  for (int64_t i = 0; i < n; ++i) out += s;
  return make(std::move(out));
}

StatusOr<Value> RepeatList(const Value& list, int64_t n, Budget& budget) {
  const auto& items = list.items();
  std::vector<Value> out;
  if (n > 0 && !items.empty()) {
    KVF_RETURN_IF_ERROR(budget.Charge(n > (int64_t{1} << 40) / static_cast<int64_t>(items.size())
                                          ? (int64_t{1} << 40)
                                          : n * static_cast<int64_t>(items.size())));
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  }
  return Value::MakeList(std::move(out), list.seq_kind());
}

StatusOr<Value> SequenceArithmetic(std::string_view op, const Value& a, const Value& b,
                                   Budget& budget) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {  // markupsafe escapes the plain side
        const std::string x = a.is_markup() ? a.as_string() : HtmlEscape(a.as_string());
        const std::string y = b.is_markup() ? b.as_string() : HtmlEscape(b.as_string());
        KVF_RETURN_IF_ERROR(budget.Build(x.size() + y.size()));
        return Value::Markup(x + y);
      }
      KVF_RETURN_IF_ERROR(budget.Build(a.as_string().size() + b.as_string().size()));
      return Value::Str(a.as_string() + b.as_string());
    }
    if (a.is_string()) {
      return TypeError("can only concatenate str (not \"" + b.TypeName() + "\") to str");
    }
    if (a.is_list() && a.seq_kind() != SeqKind::kIterator) {
      if (!b.is_list() || b.seq_kind() != a.seq_kind()) {
        return TypeError("can only concatenate " + a.TypeName() + " (not \"" + b.TypeName() +
                         "\") to " + a.TypeName());
      }
      KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(a.items().size() + b.items().size())));
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::MakeList(std::move(items), a.seq_kind());
    }
  }
  if (op == "*") {
    const Value& seq = a.is_number() ? b : a;
    const Value& count = a.is_number() ? a : b;
    if (count.is_int() || count.is_bool()) {
      if (seq.is_string()) return RepeatString(seq, count.as_integer(), budget);
      if (seq.is_list() && seq.seq_kind() != SeqKind::kIterator) {
        return RepeatList(seq, count.as_integer(), budget);
      }
    }
  }
  if (op == "%" && a.is_string()) {
    KVF_ASSIGN_OR_RETURN(std::string s, PercentFormat(a.as_string(), b, a.is_markup(), budget));
    return a.is_markup() ? Value::Markup(std::move(s)) : Value::Str(std::move(s));
  }
  return Unsupported(op, a, b);
}

// Python's list.__lt__ and friends: the first differing item decides, else the length.
StatusOr<bool> CompareSequences(std::string_view op, const std::vector<Value>& a,
                                const std::vector<Value>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && Equals(a[i], b[i])) ++i;
  if (i < a.size() && i < b.size()) return CompareOp(op, a[i], b[i]);
  const size_t x = a.size(), y = b.size();
  if (op == "<") return x < y;
  if (op == "<=") return x <= y;
  if (op == ">") return x > y;
  return x >= y;
}

StatusOr<bool> Ordering(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return op == "<" ? x < y : op == "<=" ? x <= y : op == ">" ? x > y : x >= y;
    }
    const int64_t x = a.as_integer(), y = b.as_integer();
    return op == "<" ? x < y : op == "<=" ? x <= y : op == ">" ? x > y : x >= y;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
  }
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      a.seq_kind() != SeqKind::kIterator) {
    return CompareSequences(op, a.items(), b.items());
  }
  return TypeError("'" + std::string(op) + "' not supported between instances of '" + a.TypeName() +
                   "' and '" + b.TypeName() + "'");
}

// Python's slice.indices(): normalized start/stop for a sequence of `len` items.
int64_t ClampIndex(int64_t i, int64_t len, bool negative_step) {
  if (i < 0) {
    i += len;
    if (i < 0) i = negative_step ? -1 : 0;
  } else if (i >= len) {
    i = negative_step ? len - 1 : len;
  }
  return i;
}

std::vector<int64_t> SliceIndices(int64_t len, const Value& start, const Value& stop,
                                  int64_t step) {
  const bool neg = step < 0;
  int64_t lo = start.is_none() ? (neg ? len - 1 : 0) : ClampIndex(start.as_integer(), len, neg);
  int64_t hi = stop.is_none() ? (neg ? -1 : len) : ClampIndex(stop.as_integer(), len, neg);
  std::vector<int64_t> out;
  for (int64_t i = lo; neg ? i > hi : i < hi; i += step) out.push_back(i);
  return out;
}

bool IsIndex(const Value& v) { return v.is_int() || v.is_bool(); }

}  // namespace

Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return InvalidArgumentError(hint.empty() ? "value is undefined" : hint);
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "jinja2.utils.Namespace object";
  return v.TypeName() + " object";
}

StatusOr<Value> Arithmetic(std::string_view op, const Value& a, const Value& b, Budget& budget) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined() && !(op == "%" && a.is_string())) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return FloatArithmetic(op, a.as_double(), b.as_double());
    return IntArithmetic(op, a.as_integer(), b.as_integer());
  }
  return SequenceArithmetic(op, a, b, budget);
}

StatusOr<Value> UnaryArithmetic(std::string_view op, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_float()) return Value::Float(op == "-" ? -v.as_float() : v.as_float());
  if (v.is_int() || v.is_bool()) {
    const int64_t i = v.as_integer();
    if (op == "+") return Value::Int(i);
    if (i == std::numeric_limits<int64_t>::min()) return Overflow();
    return Value::Int(-i);
  }
  return TypeError("bad operand type for unary " + std::string(op) + ": '" + v.TypeName() + "'");
}

StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "in") return Contains(b, a);
  if (op == "notin") {
    KVF_ASSIGN_OR_RETURN(bool in, Contains(b, a));
    return !in;
  }
  return Ordering(op, a, b);
}

StatusOr<bool> Less(const Value& a, const Value& b) { return Ordering("<", a, b); }

StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError("'in <string>' requires string as left operand, not " + item.TypeName());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_string()) return container.as_dict().Find(item.as_string()) != nullptr;
      if ((item.is_list() && item.seq_kind() == SeqKind::kList) || item.is_dict()) {
        return TypeError("unhashable type: '" + item.TypeName() + "'");
      }
      return false;
    default:
      return TypeError("argument of type '" + container.TypeName() + "' is not iterable");
  }
}

StatusOr<Value> GetAttr(const Value& obj, const std::string& name, Budget& budget) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.as_namespace().attrs.Find(name);
    if (v != nullptr) return *v;
  } else {
    std::optional<Value> method = LookupMethod(obj, name, &budget);
    if (method) return *std::move(method);
    if (obj.is_dict()) {
      const Value* v = obj.as_dict().Find(name);
      if (v != nullptr) return *v;
    }
  }
  return Value::Undefined("'" + ObjectTypeRepr(obj) + "' has no attribute '" + name + "'");
}

StatusOr<Value> GetItem(const Value& obj, const Value& key, Budget& budget) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() && key.is_string()) {
    const Value* v = obj.as_dict().Find(key.as_string());
    if (v != nullptr) return *v;
  } else if (IsIndex(key) &&
             (obj.is_string() || (obj.is_list() && obj.seq_kind() != SeqKind::kIterator))) {
    int64_t i = key.as_integer();
    if (obj.is_string()) {
      const std::string& s = obj.as_string();
      const bool ascii = utf8::IsAscii(s);
      const auto cps = ascii ? std::vector<char32_t>() : utf8::Decode(s);
      const int64_t len = ascii ? static_cast<int64_t>(s.size()) : static_cast<int64_t>(cps.size());
      if (i < 0) i += len;
      if (i >= 0 && i < len) {
        if (ascii) return Value::Str(std::string(1, s[i]));
        std::string out;
        utf8::Append(cps[i], &out);
        return Value::Str(std::move(out));
      }
    } else {
      const int64_t len = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += len;
      if (i >= 0 && i < len) return obj.items()[i];
    }
  }
  if (key.is_string()) {  // the sandbox's getitem falls back to the attribute
    if (obj.is_namespace()) {
      const Value* v = obj.as_namespace().attrs.Find(key.as_string());
      if (v != nullptr) return *v;
    } else if (std::optional<Value> m = LookupMethod(obj, key.as_string(), &budget)) {
      return *std::move(m);
    }
    return Value::Undefined("'" + ObjectTypeRepr(obj) + "' has no attribute '" + key.as_string() +
                            "'");
  }
  return Value::Undefined(ObjectTypeRepr(obj) + " has no element " + PyRepr(key));
}

StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step,
                         Budget& budget) {
  // Jinja2 compiles a slice to Python's own subscription, not to the sandbox's getitem, so a
  // bad slice raises instead of giving an Undefined.
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) return InvalidArgumentError("unhashable type: 'slice'");
  if (!obj.is_string() && !(obj.is_list() && obj.seq_kind() != SeqKind::kIterator)) {
    return InvalidArgumentError("'" + obj.TypeName() + "' object is not subscriptable");
  }
  for (const Value* b : {&start, &stop, &step}) {
    if (b->is_undefined()) return UndefinedError(*b);
    if (!b->is_none() && !IsIndex(*b)) {
      return InvalidArgumentError(
          "slice indices must be integers or None or have an __index__ method");
    }
  }
  const int64_t st = step.is_none() ? 1 : step.as_integer();
  if (st == 0) return InvalidArgumentError("slice step cannot be zero");
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    KVF_RETURN_IF_ERROR(budget.ChargeBytes(s.size()));
    const bool ascii = utf8::IsAscii(s);
    const auto cps = ascii ? std::vector<char32_t>() : utf8::Decode(s);
    const int64_t len = ascii ? static_cast<int64_t>(s.size()) : static_cast<int64_t>(cps.size());
    std::string out;
    for (int64_t i : SliceIndices(len, start, stop, st)) {
      if (ascii) {
        out.push_back(s[i]);
      } else {
        utf8::Append(cps[i], &out);
      }
    }
    return Value::Str(std::move(out));
  }
  const auto& items = obj.items();
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(items.size())));
  std::vector<Value> out;
  for (int64_t i : SliceIndices(static_cast<int64_t>(items.size()), start, stop, st)) {
    out.push_back(items[i]);
  }
  return Value::MakeList(std::move(out), obj.seq_kind());
}

StatusOr<std::vector<Value>> Iterate(const Value& v, Budget& budget) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(v.items().size())));
      return v.items();
    case Value::Kind::kDict: {
      KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(v.as_dict().size())));
      std::vector<Value> keys;
      for (const auto& [k, item] : v.as_dict().entries()) keys.push_back(Value::Str(k));
      return keys;
    }
    case Value::Kind::kString: {
      KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(v.as_string().size())));
      std::vector<Value> chars;
      for (char32_t cp : utf8::Decode(v.as_string())) {
        std::string c;
        utf8::Append(cp, &c);
        chars.push_back(Value::Str(std::move(c)));
      }
      return chars;
    }
    default:
      return InvalidArgumentError("'" + v.TypeName() + "' object is not iterable");
  }
}

StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8::Length(v.as_string()));
    case Value::Kind::kList:
      if (v.seq_kind() != SeqKind::kIterator) return static_cast<int64_t>(v.items().size());
      break;
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().size());
    default:
      break;
  }
  return InvalidArgumentError("object of type '" + v.TypeName() + "' has no len()");
}

}  // namespace kvferry::jinja
