// Registers LeaseTable on the extension module. Called by module.cc only.
#pragma once

#include <nanobind/nanobind.h>

namespace kvferry::python {

void RegisterLeases(nanobind::module_& m);

}  // namespace kvferry::python
