// Methods templates call on values, as Python's bound methods: str (startswith, endswith,
// strip, lstrip, rstrip, split, rsplit, splitlines, upper, lower, title, capitalize, replace,
// find, rfind, count, join, format, center, ljust, rjust, removeprefix, removesuffix, is*),
// dict (get, items, keys, values, copy) and list/tuple (count, index, copy).
//
// Methods that would mutate a list or dict (append, update, ...) are refused the way
// ImmutableSandboxedEnvironment refuses them: the lookup yields an Undefined whose use raises
// "access to attribute 'append' of 'list' object is unsafe.". Real Python methods this
// renderer does not implement (str.zfill, ...) exist (so `is defined` holds) but fail with
// kUnimplemented when called.
//
// Thread-safety: pure functions; a bound method holds a copy of its object and the Budget
// pointer of the render that created it.
#pragma once

#include <optional>
#include <string>

#include "jinja/budget.h"
#include "jinja/value.h"

namespace kvferry::jinja {

// The attribute `name` of `obj` if it is a method (bound to a copy of obj), an "unsafe"
// Undefined for a mutating method, or nullopt when obj's type has no such method.
std::optional<Value> LookupMethod(const Value& obj, const std::string& name, Budget* budget);

}  // namespace kvferry::jinja
