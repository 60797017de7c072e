// kvferry._kvferry: the extension module under the kvferry Python package (python/kvferry).
// The package's .py files give the public API; this module is its C++ half.
#include <nanobind/nanobind.h>

#include "agent_bindings.h"
#include "block_bindings.h"
#include "connector_bindings.h"
#include "lease_bindings.h"
#include "relayout_bindings.h"
#include "status_error.h"

NB_MODULE(_kvferry, m) {
  m.doc() =
      "kvferry's C++ core: the transfer agent, the KV block geometry and re-layout, P's lease "
      "table, and one TP rank's worker half of the connector.";
  kvferry::python::RegisterStatusErrors(m);
  kvferry::python::RegisterBlocks(m);
  kvferry::python::RegisterRelayout(m);
  kvferry::python::RegisterAgent(m);
  kvferry::python::RegisterLeases(m);
  kvferry::python::RegisterConnector(m);
}
