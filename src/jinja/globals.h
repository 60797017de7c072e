// The global functions every template sees: range (the sandbox's, at most 100000 items),
// dict, namespace, and transformers' raise_exception(message) and strftime_now(format).
//
// Thread-safety: the functions run on the rendering thread; the hooks belong to that render.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jinja/budget.h"
#include "jinja/value.h"

namespace kvferry::jinja {

// What the globals need from the render that installs them.
struct GlobalHooks {
  Budget* budget = nullptr;
  std::optional<std::tm> now;                                    // strftime_now's time
  std::function<void()> on_raise;                                // raise_exception called
  std::function<void(std::shared_ptr<Namespace>)> on_namespace;  // namespace() created one
};

std::vector<std::pair<std::string, Value>> MakeGlobals(const GlobalHooks& hooks);

}  // namespace kvferry::jinja
