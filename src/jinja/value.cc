#include "jinja/value.h"

#include <limits>

#include "jinja/utf8.h"

namespace kvferry::jinja {

const Value* Dict::Find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::Set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

void Dict::clear() {
  entries_.clear();
  index_.clear();
}

Value Value::Undefined(std::string hint) { return Value(UndefinedRep{std::move(hint)}); }
Value Value::None() { return Value(NoneRep{}); }
Value Value::Bool(bool b) { return Value(Rep(b)); }
Value Value::Int(int64_t i) { return Value(Rep(i)); }
Value Value::Float(double d) { return Value(Rep(d)); }
Value Value::Str(std::string s) { return Value(Rep(std::move(s))); }
Value Value::Markup(std::string s) {
  Value v(Rep(std::move(s)));
  v.markup_ = true;
  return v;
}

Value Value::MakeList(std::vector<Value> items, SeqKind kind) {
  auto list = std::make_shared<List>();
  list->items = std::move(items);
  list->kind = kind;
  return Value(Rep(std::shared_ptr<const List>(std::move(list))));
}

Value Value::MakeDict(Dict dict) {
  return Value(Rep(std::shared_ptr<const Dict>(std::make_shared<Dict>(std::move(dict)))));
}

Value Value::MakeNamespace(std::shared_ptr<Namespace> ns) { return Value(Rep(std::move(ns))); }

Value Value::MakeCallable(std::string name, NativeFn fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(Rep(std::shared_ptr<const Callable>(std::move(c))));
}

namespace {

StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) {
    return InvalidArgumentError("context nests deeper than " + std::to_string(kMaxNesting));
  }
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
    case T::discarded:
      return Value::None();
    case T::boolean:
      return Value::Bool(j.get<bool>());
    case T::number_integer:
      return Value::Int(j.get<int64_t>());
    case T::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return OutOfRangeError("integer " + std::to_string(u) + " is beyond 64 bits");
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value::Float(j.get<double>());
    case T::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (!utf8::IsValid(s)) return InvalidArgumentError("a context string is not valid UTF-8");
      return Value::Str(s);
    }
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        KVF_ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items));
    }
    case T::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) {
        if (!utf8::IsValid(k)) return InvalidArgumentError("a context key is not valid UTF-8");
        KVF_ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1));
        d.Set(k, std::move(v));
      }
      return Value::MakeDict(std::move(d));
    }
    case T::binary:
      return InvalidArgumentError("binary JSON values cannot enter a template");
  }
  return InternalError("unknown JSON type");
}

}  // namespace

StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 0); }

double Value::as_double() const {
  if (is_float()) return as_float();
  return static_cast<double>(as_integer());
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::kList:
      return std::get<std::shared_ptr<const List>>(rep_).get();
    case Kind::kDict:
      return std::get<std::shared_ptr<const Dict>>(rep_).get();
    case Kind::kNamespace:
      return std::get<std::shared_ptr<Namespace>>(rep_).get();
    case Kind::kCallable:
      return std::get<std::shared_ptr<const Callable>>(rep_).get();
    default:
      return nullptr;
  }
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return seq_kind() == SeqKind::kIterator || !items().empty();
    case Kind::kDict:
      return !as_dict().empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return seq_kind() == SeqKind::kTuple  ? "tuple"
             : seq_kind() == SeqKind::kList ? "list"
                                            : "generator";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

namespace {

bool EqualsAt(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNesting) return false;
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_integer() == b.as_integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      if (a.seq_kind() != b.seq_kind()) return false;
      if (a.seq_kind() == SeqKind::kIterator) return a.identity() == b.identity();
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!EqualsAt(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case K::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* w = y.Find(k);
        if (w == nullptr || !EqualsAt(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

}  // namespace

bool Equals(const Value& a, const Value& b) { return EqualsAt(a, b, 0); }

}  // namespace kvferry::jinja
