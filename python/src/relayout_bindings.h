// Registers CacheSpec and relayout_tokens on the extension module. Called by module.cc only.
#pragma once

#include <nanobind/nanobind.h>

namespace kvferry::python {

void RegisterRelayout(nanobind::module_& m);

}  // namespace kvferry::python
