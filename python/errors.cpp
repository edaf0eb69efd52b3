#include "python/errors.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "util/error.h"

namespace nb = nanobind;

namespace dcpctl::py {

namespace {

// Raises dcpctl._errors.error_for(code)(message, file, offset, key). Called with the GIL held.
void raise_error(const Error& e) {
  nb::module_ errors = nb::module_::import_("dcpctl._errors");
  const Where& w = e.where();
  nb::object offset = w.offset ? nb::cast(*w.offset) : nb::none();
  nb::object cls = errors.attr("error_for")(static_cast<int>(e.exit_code()));
  nb::object exc = cls(e.what(), w.file, offset, w.key);
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

void register_errors() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      try {
        raise_error(e);
      } catch (nb::python_error& pe) {
        pe.restore();  // the import or the constructor failed: that error, not a lost one
      }
    }
  });
}

}  // namespace dcpctl::py
