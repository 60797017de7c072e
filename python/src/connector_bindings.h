// Registers ConnectorWorker (kvferry's C++ connector, one TP rank's worker half) on the
// extension module. Called by module.cc only.
#pragma once

#include <nanobind/nanobind.h>

namespace kvferry::python {

void RegisterConnector(nanobind::module_& m);

}  // namespace kvferry::python
