// Registers kvferry._kvferry._Agent (the C++ transfer agent) and its enums on the extension
// module; kvferry/agent.py wraps it in the public kvferry.Agent. Called by module.cc only.
#pragma once

#include <nanobind/nanobind.h>

namespace kvferry::python {

void RegisterAgent(nanobind::module_& m);

}  // namespace kvferry::python
