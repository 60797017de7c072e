// The sequence filters: first, last, join, items, reverse, sort, dictsort, min/max, sum,
// unique, batch, map, select/reject and their attr forms, with Jinja2's attribute paths.
#include <algorithm>
#include <optional>

#include "jinja/call_args.h"
#include "jinja/filters.h"
#include "jinja/filters_internal.h"
#include "jinja/operators.h"
#include "jinja/py_format.h"
#include "jinja/str_ops.h"
#include "jinja/tests.h"
#include "jinja/utf8.h"

namespace kvferry::jinja::internal {
namespace {

Value Iterator(std::vector<Value> items) {
  return Value::MakeList(std::move(items), SeqKind::kIterator);
}

// ---- attribute paths (make_attrgetter) ----

// "a.b.0" -> ["a", "b", 0]; a non-string attribute is one part.
std::vector<Value> AttributeParts(const Value& attribute) {
  if (!attribute.is_string()) return {attribute};
  std::vector<Value> parts;
  auto split = StrSplit(attribute.as_string(), std::string("."), -1, false);
  for (auto& p : *split) {
    const bool digits =
        !p.empty() && std::all_of(p.begin(), p.end(), IsAsciiDigit) && p.size() < 18;
    parts.push_back(digits ? Value::Int(std::stoll(p)) : Value::Str(p));
  }
  return parts;
}

StatusOr<Value> GetPath(Value item, const std::vector<Value>& parts, const Value* fallback,
                        Budget& budget) {
  for (const Value& part : parts) {
    KVF_ASSIGN_OR_RETURN(item, GetItem(item, part, budget));
    if (fallback != nullptr && item.is_undefined()) item = *fallback;
  }
  return item;
}

Value IgnoreCase(const Value& v) { return v.is_string() ? Value::Str(StrLower(v.as_string())) : v; }

// Sorts `items` by `keys` (stable, as Python's sorted); comparison errors are returned.
Status SortByKeys(std::vector<Value>* items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    auto less = reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  KVF_RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return Status::Ok();
}

// Python's sorted(..., key=attrgetter) with Jinja2's case folding.
StatusOr<std::vector<Value>> SortKeys(const std::vector<Value>& items, const Value* attribute,
                                      bool case_sensitive, Budget& budget) {
  std::vector<std::vector<Value>> paths;
  if (attribute != nullptr && !attribute->is_none()) {
    if (attribute->is_string()) {
      KVF_ASSIGN_OR_RETURN(auto names,
                           StrSplit(attribute->as_string(), std::string(","), -1, false));
      for (auto& n : names) paths.push_back(AttributeParts(Value::Str(n)));
    } else {
      paths.push_back({*attribute});
    }
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    if (paths.empty()) {
      keys.push_back(case_sensitive ? item : IgnoreCase(item));
      continue;
    }
    std::vector<Value> parts;
    for (const auto& path : paths) {
      KVF_ASSIGN_OR_RETURN(Value k, GetPath(item, path, nullptr, budget));
      parts.push_back(case_sensitive ? k : IgnoreCase(k));
    }
    keys.push_back(Value::MakeList(std::move(parts)));
  }
  return keys;
}

}  // namespace

StatusOr<Value> First(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("first", args, {}).status());
  if (v.is_undefined()) return v;
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

StatusOr<Value> Last(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("last", args, {}).status());
  if (v.is_list() && v.seq_kind() == SeqKind::kIterator) {
    return InvalidArgumentError("'generator' object is not reversible");
  }
  if (!v.is_undefined() && !v.is_list() && !v.is_dict() && !v.is_string()) {
    return InvalidArgumentError("'" + v.TypeName() + "' object is not reversible");
  }
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

StatusOr<Value> Join(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("join", args, {"d", "attribute"}));
  const std::string sep = ToPyStr(b.GetOr(0, Value::Str("")));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  const Value* attribute = b.Get(1);
  const auto parts =
      attribute && !attribute->is_none() ? AttributeParts(*attribute) : std::vector<Value>();
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    KVF_ASSIGN_OR_RETURN(Value item, GetPath(items[i], parts, nullptr, budget));
    if (i > 0) out += sep;
    out += ToPyStr(item);
    KVF_RETURN_IF_ERROR(budget.CheckSize(out.size()));
  }
  KVF_RETURN_IF_ERROR(budget.ChargeBytes(out.size()));
  return Value::Str(std::move(out));
}

StatusOr<Value> Items(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("items", args, {}).status());
  if (v.is_undefined()) return Iterator({});
  if (!v.is_dict()) return InvalidArgumentError("Can only get item pairs from a mapping.");
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(v.as_dict().size())));
  std::vector<Value> out;
  for (const auto& [k, item] : v.as_dict().entries()) {
    out.push_back(Value::MakeList({Value::Str(k), item}, SeqKind::kTuple));
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Reverse(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_RETURN_IF_ERROR(BoundArgs::Bind("reverse", args, {}).status());
  if (v.is_string()) {
    auto cps = utf8::Decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::Str(utf8::Encode(cps));
  }
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  std::reverse(items.begin(), items.end());
  const bool reversible = !(v.is_list() && v.seq_kind() == SeqKind::kIterator);
  return Value::MakeList(std::move(items), reversible ? SeqKind::kIterator : SeqKind::kList);
}

StatusOr<Value> Sort(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b,
                       BoundArgs::Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  KVF_ASSIGN_OR_RETURN(auto keys,
                       SortKeys(items, b.Get(2), b.GetOr(1, Value::Bool(false)).Truthy(), budget));
  KVF_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), b.GetOr(0, Value::Bool(false)).Truthy()));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> DictSort(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b,
                       BoundArgs::Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_dict())
    return InvalidArgumentError("'" + v.TypeName() + "' object has no attribute 'items'");
  const Value by = b.GetOr(1, Value::Str("key"));
  if (!by.is_string() || (by.as_string() != "key" && by.as_string() != "value")) {
    return InvalidArgumentError("You can only sort by either \"key\" or \"value\"");
  }
  const bool case_sensitive = b.GetOr(0, Value::Bool(false)).Truthy();
  std::vector<Value> items, keys;
  for (const auto& [k, item] : v.as_dict().entries()) {
    items.push_back(Value::MakeList({Value::Str(k), item}, SeqKind::kTuple));
    const Value key = by.as_string() == "key" ? Value::Str(k) : item;
    keys.push_back(case_sensitive ? key : IgnoreCase(key));
  }
  KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(items.size())));
  KVF_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), b.GetOr(2, Value::Bool(false)).Truthy()));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> MinMax(const Value& v, const CallArgs& args, Budget& budget, bool max) {
  KVF_ASSIGN_OR_RETURN(auto b,
                       BoundArgs::Bind(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  KVF_ASSIGN_OR_RETURN(auto keys,
                       SortKeys(items, b.Get(1), b.GetOr(0, Value::Bool(false)).Truthy(), budget));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    KVF_ASSIGN_OR_RETURN(bool better, max ? Less(keys[best], keys[i]) : Less(keys[i], keys[best]));
    if (better) best = i;
  }
  return items[best];
}

StatusOr<Value> Sum(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("sum", args, {"attribute", "start"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  const Value* attribute = b.Get(0);
  const auto parts =
      attribute && !attribute->is_none() ? AttributeParts(*attribute) : std::vector<Value>();
  Value total = b.GetOr(1, Value::Int(0));
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value x, GetPath(item, parts, nullptr, budget));
    KVF_ASSIGN_OR_RETURN(total, Arithmetic("+", total, x, budget));
  }
  return total;
}

StatusOr<Value> Unique(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("unique", args, {"case_sensitive", "attribute"}));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  const bool case_sensitive = b.GetOr(0, Value::Bool(false)).Truthy();
  const Value* attribute = b.Get(1);
  const auto parts =
      attribute && !attribute->is_none() ? AttributeParts(*attribute) : std::vector<Value>();
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value key, GetPath(item, parts, nullptr, budget));
    if (!case_sensitive) key = IgnoreCase(key);
    if ((key.is_list() && key.seq_kind() == SeqKind::kList) || key.is_dict()) {
      return InvalidArgumentError("unhashable type: '" + key.TypeName() + "'");
    }
    KVF_RETURN_IF_ERROR(budget.Charge(static_cast<int64_t>(seen.size())));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Batch(const Value& v, const CallArgs& args, Budget& budget) {
  KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("batch", args, {"linecount", "fill_with"}, 1));
  KVF_ASSIGN_OR_RETURN(int64_t count, ArgInt("batch", "linecount", *b.Get(0)));
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  std::vector<Value> out;
  std::vector<Value> row;
  for (const Value& item : items) {
    if (static_cast<int64_t>(row.size()) == count) {
      out.push_back(Value::MakeList(std::move(row)));
      row.clear();
    }
    row.push_back(item);
  }
  if (!row.empty()) {
    const Value* fill = b.Get(1);
    if (fill != nullptr && !fill->is_none() && static_cast<int64_t>(row.size()) < count) {
      KVF_RETURN_IF_ERROR(budget.Charge(count - static_cast<int64_t>(row.size())));
      row.resize(count, *fill);
    }
    out.push_back(Value::MakeList(std::move(row)));
  }
  return Iterator(std::move(out));
}

StatusOr<Value> Map(const Value& v, const CallArgs& args, Budget& budget) {
  if (!v.Truthy()) return Iterator({});
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  std::vector<Value> out;
  if (args.args.empty() && !args.kwargs.empty()) {
    KVF_ASSIGN_OR_RETURN(auto b, BoundArgs::Bind("map", args, {"attribute", "default"}, 1));
    const auto parts = AttributeParts(*b.Get(0));
    const Value* fallback = b.Get(1);
    for (const Value& item : items) {
      KVF_ASSIGN_OR_RETURN(Value x, GetPath(item, parts, fallback, budget));
      out.push_back(std::move(x));
    }
    return Iterator(std::move(out));
  }
  if (args.args.empty()) return InvalidArgumentError("map requires a filter argument");
  KVF_ASSIGN_OR_RETURN(std::string name, ArgString("map", "name", args.args[0]));
  CallArgs rest{{args.args.begin() + 1, args.args.end()}, args.kwargs};
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value x, ApplyFilter(name, item, rest, budget));
    out.push_back(std::move(x));
  }
  return Iterator(std::move(out));
}

StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& args, Budget& budget,
                               bool lookup_attr, bool select) {
  if (!v.Truthy()) return Iterator({});
  KVF_ASSIGN_OR_RETURN(auto items, Iterate(v, budget));
  size_t off = 0;
  std::vector<Value> parts;
  if (lookup_attr) {
    if (args.args.empty()) return InvalidArgumentError("Missing parameter for attribute name");
    parts = AttributeParts(args.args[0]);
    off = 1;
  }
  std::optional<std::string> test;
  if (args.args.size() > off) {
    KVF_ASSIGN_OR_RETURN(test, ArgString("select", "test", args.args[off]));
  }
  CallArgs rest;
  if (args.args.size() > off + 1) rest.args.assign(args.args.begin() + off + 1, args.args.end());
  rest.kwargs = args.kwargs;
  std::vector<Value> out;
  for (const Value& item : items) {
    KVF_ASSIGN_OR_RETURN(Value x, GetPath(item, parts, nullptr, budget));
    bool pass = x.Truthy();
    if (test) {
      KVF_ASSIGN_OR_RETURN(pass, ApplyTest(*test, x, rest, budget));
    }
    if (pass == select) out.push_back(item);
  }
  return Iterator(std::move(out));
}

}  // namespace kvferry::jinja::internal
