// Value: what a template expression evaluates to, with Python's (Jinja2's) semantics.
//
// kvferry's own type rather than nlohmann::json, because templates need what JSON cannot hold:
// Jinja2's Undefined (with the message it raises when misused), callables (macros, bound
// methods such as `s.startswith`, globals), namespace objects that a `set` may change through
// any reference, tuples and one-shot iterators (what `select` and `reverse` return, which are
// truthy and have no length), and dicts that keep insertion order (json.dumps in `tojson`
// preserves it). Contexts come in as nlohmann::ordered_json and convert once (FromJson).
//
// Lists and dicts are immutable once built and shared by reference, as
// ImmutableSandboxedEnvironment forbids mutating them; only a Namespace changes in place.
//
// Thread-safety: a Value is not synchronized; the renderer uses Values on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "kvferry/common/status.h"

namespace kvferry::jinja {

class Value;

// How deep lists and dicts may nest where the renderer walks them recursively (converting a
// context, comparing, printing, tojson); deeper is an error (Python stops at its recursion
// limit too).
inline constexpr int kMaxNesting = 256;

// A list-like value. kIterator stands for Python iterators and generators (`select`, `map`,
// `reverse` on a list): iterable, always truthy, without len().
enum class SeqKind : uint8_t { kList, kTuple, kIterator };
struct List {
  std::vector<Value> items;
  SeqKind kind = SeqKind::kList;
};

// An insertion-ordered dict with string keys (JSON objects and template dict literals; other
// key types are rejected where a dict is built).
class Dict {
 public:
  const Value* Find(std::string_view key) const;
  // Inserts or replaces, keeping the first insertion's position, as a Python dict does.
  void Set(std::string key, Value value);
  size_t size() const;
  bool empty() const;
  void clear();
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// Jinja2's namespace(): attributes a `set ns.x = ...` changes wherever ns is referenced.
struct Namespace {
  Dict attrs;
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFn = std::function<StatusOr<Value>(CallArgs args)>;
struct Callable {
  std::string name;  // for messages: "macro 'm'", "method 'startswith'"
  NativeFn fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // lists, tuples, iterators (SeqKind)
    kDict,
    kNamespace,
    kCallable,
  };

  // Undefined, with the message Jinja2 raises when it is used (empty: a generic one).
  Value() = default;
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value Str(std::string s);
  // A string marked safe (markupsafe's Markup, what `safe` and `escape` return): a string in
  // every respect, except that + and % escape the plain strings they combine it with.
  static Value Markup(std::string s);
  static Value MakeList(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(std::shared_ptr<Namespace> ns);
  static Value MakeCallable(std::string name, NativeFn fn);

  // Converts JSON (objects keep their order). Fails on integers beyond int64 and on strings
  // that are not valid UTF-8.
  static StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return static_cast<Kind>(rep_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (Python's numbers.Number; bool is an int subclass).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_markup() const { return markup_; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  const std::string& undefined_hint() const { return std::get<UndefinedRep>(rep_).hint; }
  bool as_bool() const { return std::get<bool>(rep_); }
  int64_t as_int() const { return std::get<int64_t>(rep_); }
  double as_float() const { return std::get<double>(rep_); }
  // Numeric value of an int, float or bool.
  double as_double() const;
  // Integer value of an int or bool.
  int64_t as_integer() const { return is_bool() ? as_bool() : as_int(); }
  const std::string& as_string() const { return std::get<std::string>(rep_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(rep_); }
  SeqKind seq_kind() const { return as_list().kind; }
  const std::vector<Value>& items() const { return as_list().items; }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(rep_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(rep_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(rep_); }
  // Identity for `is sameas` and equality of namespaces and callables.
  const void* identity() const;

  // Python truthiness; Undefined is false.
  bool Truthy() const;

  // Python's type name ("str", "dict", "NoneType", ...), for messages.
  std::string TypeName() const;

 private:
  struct UndefinedRep {
    std::string hint;
  };
  struct NoneRep {};
  using Rep = std::variant<UndefinedRep, NoneRep, bool, int64_t, double, std::string,
                           std::shared_ptr<const List>, std::shared_ptr<const Dict>,
                           std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
  explicit Value(Rep rep) : rep_(std::move(rep)) {}
  Rep rep_;
  bool markup_ = false;
};

// Defined here, where Value is complete.
inline size_t Dict::size() const { return entries_.size(); }
inline bool Dict::empty() const { return entries_.empty(); }

// Python ==: numbers compare by value across int/float/bool, lists and dicts deeply, a list
// never equals a tuple, two Undefineds are equal, namespaces and callables by identity.
// Values nested deeper than kMaxNesting compare unequal.
bool Equals(const Value& a, const Value& b);

}  // namespace kvferry::jinja
