// The StatusCode enum in Python and the translator from StatusError to kvferry's exception
// classes (kvferry/_errors.py, indexed by code).
#include "status_error.h"

#include <exception>

namespace nb = nanobind;

namespace kvferry::python {
namespace {

constexpr int kNumCodes = static_cast<int>(StatusCode::kUnauthenticated) + 1;

void RegisterStatusCode(nb::module_& m) {
  nb::enum_<StatusCode> e(m, "StatusCode", "What a failed kvferry call's caller should do next.");
  for (int c = 0; c < kNumCodes; ++c) {
    auto code = static_cast<StatusCode>(c);
    e.value(std::string(StatusCodeName(code)).c_str(), code);
  }
}

// Raises the Python exception for `error` (the GIL is held in a translator).
void Raise(const StatusError& error) {
  nb::object classes = nb::module_::import_("kvferry._errors").attr("BY_CODE");
  nb::object cls = classes[static_cast<int>(error.code())];
  nb::object exc = cls(error.what(), nb::cast(error.code()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

void RegisterStatusErrors(nb::module_& m) {
  RegisterStatusCode(m);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      Raise(e);
    }
  });
}

}  // namespace kvferry::python
