// dcpctl._dcpctl: the extension under the Python package dcpctl (python/dcpctl/__init__.py, which
// is the API and its documentation; docs/python.md). It registers the modules this build holds
// (modules/modules.h, as the command line does) and the item layer's readers (cmd/app.cpp's), then
// binds the error translation, the checkpoint reader and the commands.
#include <nanobind/nanobind.h>

#include "item/torch_file.h"
#include "modules/modules.h"
#include "python/checkpoint.h"
#include "python/commands.h"
#include "python/errors.h"
#include "write/manifest.h"

NB_MODULE(_dcpctl, m) {
  dcpctl::install_item_readers();  // the readers of torch.save zips, as cmd/app.cpp installs them
  dcpctl::register_modules();      // the modules this build holds, as the command line registers them
  dcpctl::set_manifest_tool_version(DCPCTL_VERSION);  // what the manifests of its outputs record, as cmd/app.cpp
  dcpctl::py::register_errors();
  dcpctl::py::bind_checkpoint(m);
  dcpctl::py::bind_commands(m);
  m.attr("__version__") = DCPCTL_VERSION;
}
