#include "jinja/globals.h"

#include <chrono>
#include <cstdio>

#include "jinja/call_args.h"
#include "jinja/operators.h"
#include "jinja/py_format.h"

namespace kvferry::jinja {
namespace {

// The sandbox's MAX_RANGE.
constexpr int64_t kMaxRange = 100000;

StatusOr<Value> Range(const CallArgs& args, Budget& budget) {
  if (!args.kwargs.empty()) return InvalidArgumentError("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3) {
    return InvalidArgumentError("range expected 1 to 3 arguments, got " +
                                std::to_string(args.args.size()));
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.args.size(); ++i) {
    const Value& v = args.args[i];
    if (v.is_undefined()) return UndefinedError(v);
    if (!v.is_int() && !v.is_bool()) {
      return InvalidArgumentError("'" + v.TypeName() +
                                  "' object cannot be interpreted as an integer");
    }
  }
  if (args.args.size() == 1) {
    bounds[1] = args.args[0].as_integer();
  } else {
    for (size_t i = 0; i < args.args.size(); ++i) bounds[i] = args.args[i].as_integer();
  }
  const auto [start, stop, step] = bounds;
  if (step == 0) return InvalidArgumentError("range() arg 3 must not be zero");
  // Python's len(range(...)), in 128 bits so that no bound overflows.
  __int128 n = 0;
  const __int128 lo = start, hi = stop, by = step;
  if (by > 0 && lo < hi) n = (hi - lo + by - 1) / by;
  if (by < 0 && lo > hi) n = (lo - hi - by - 1) / -by;
  if (n > kMaxRange) {
    return OutOfRangeError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(n)));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
    items.push_back(Value::Int(start + i * step));
  return Value::MakeList(std::move(items));
}

// dict(mapping or pairs, **kwargs) and namespace(...) take the same arguments.
StatusOr<Dict> DictFromArgs(std::string_view fn, const CallArgs& args) {
  if (args.args.size() > 1) {
    return InvalidArgumentError(std::string(fn) + " expected at most 1 argument, got " +
                                std::to_string(args.args.size()));
  }
  Dict d;
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().entries()) d.Set(k, v);
    } else if (src.is_list()) {
      for (const Value& pair : src.items()) {
        if (!pair.is_list() || pair.items().size() != 2 || !pair.items()[0].is_string()) {
          return InvalidArgumentError(std::string(fn) +
                                      ": expected pairs of a string key and a value");
        }
        d.Set(pair.items()[0].as_string(), pair.items()[1]);
      }
    } else {
      return InvalidArgumentError("'" + src.TypeName() + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : args.kwargs) d.Set(k, v);
  return d;
}

// Python's datetime.strftime: %f, %z and %Z are datetime's own (a naive local time has no
// zone), everything else is the C library's.
StatusOr<Value> StrftimeNow(const CallArgs& args, const std::optional<std::tm>& fixed) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("strftime_now", args, {"format"}, 1));
  KVF_ASSIGN_OR_RETURN(std::string fmt, ArgString("strftime_now", "format", *b.Get(0)));
  std::tm tm{};
  long micros = 0;
  if (fixed) {
    tm = *fixed;
  } else {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    localtime_r(&t, &tm);
    micros = static_cast<long>(
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
        1000000);
  }
  std::string expanded;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '%' && i + 1 < fmt.size()) {
      const char c = fmt[i + 1];
      if (c == 'f') {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "%06ld", micros);
        expanded += buf;
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      expanded += fmt.substr(i, 2);
      ++i;
      continue;
    }
    expanded.push_back(fmt[i]);
  }
  if (expanded.size() > 4096) return InvalidArgumentError("strftime_now: format too long");
  std::string out(expanded.size() * 8 + 64, '\0');
  // A leading space tells an empty result from a buffer that was too small.
  const size_t n = std::strftime(out.data(), out.size(), (" " + expanded).c_str(), &tm);
  if (n == 0) return InvalidArgumentError("strftime_now: result too long");
  return Value::Str(out.substr(1, n - 1));
}

}  // namespace

std::vector<std::pair<std::string, Value>> MakeGlobals(const GlobalHooks& hooks) {
  std::vector<std::pair<std::string, Value>> g;
  Budget* budget = hooks.budget;
  g.emplace_back("range", Value::MakeCallable(
                              "range", [budget](CallArgs args) { return Range(args, *budget); }));
  g.emplace_back("dict", Value::MakeCallable("dict", [](CallArgs args) -> StatusOr<Value> {
                   KVF_ASSIGN_OR_RETURN(Dict d, DictFromArgs("dict", args));
                   return Value::MakeDict(std::move(d));
                 }));
  auto on_namespace = hooks.on_namespace;
  g.emplace_back("namespace",
                 Value::MakeCallable("namespace", [on_namespace](CallArgs args) -> StatusOr<Value> {
                   KVF_ASSIGN_OR_RETURN(Dict d, DictFromArgs("namespace", args));
                   auto ns = std::make_shared<Namespace>();
                   ns->attrs = std::move(d);
                   if (on_namespace) on_namespace(ns);
                   return Value::MakeNamespace(std::move(ns));
                 }));
  auto on_raise = hooks.on_raise;
  g.emplace_back(
      "raise_exception",
      Value::MakeCallable("raise_exception", [on_raise](CallArgs args) -> StatusOr<Value> {
        KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("raise_exception", args, {"message"}, 1));
        if (on_raise) on_raise();
        return InvalidArgumentError(ToPyStr(*b.Get(0)));
      }));
  const std::optional<std::tm> now = hooks.now;
  g.emplace_back("strftime_now", Value::MakeCallable("strftime_now", [now](CallArgs args) {
                   return StrftimeNow(args, now);
                 }));
  return g;
}

}  // namespace kvferry::jinja
