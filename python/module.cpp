// dcpctl._dcpctl: the extension under the Python package dcpctl (python/dcpctl/__init__.py, which
// is the API and its documentation; docs/python.md). It registers the modules this build holds, as
// cmd/modules.cpp does for the command line (the GGUF reader, the object stores, torch_checkpointing's
// folders, the LoRA view), and the item layer's readers (cmd/app.cpp's main), then binds the error
// translation, the checkpoint reader and the commands.
#include <nanobind/nanobind.h>

#include "item/torch_file.h"
#include "python/checkpoint.h"
#include "python/commands.h"
#include "python/errors.h"

#ifdef DCPCTL_WITH_GGUF
#include "gguf/register.h"
#endif
#ifdef DCPCTL_WITH_OBJSTORE
#include "objstore/register.h"
#endif
#ifdef DCPCTL_WITH_TORCH_CHECKPOINTING
#include "torch_checkpointing/register.h"
#endif
#ifdef DCPCTL_WITH_LORA
#include "lora/register.h"
#endif

NB_MODULE(_dcpctl, m) {
  dcpctl::install_item_readers();  // the readers of torch.save zips, as cmd/app.cpp installs them
#ifdef DCPCTL_WITH_GGUF
  dcpctl::register_gguf();
#endif
#ifdef DCPCTL_WITH_OBJSTORE
  dcpctl::register_objstore();
#endif
#ifdef DCPCTL_WITH_TORCH_CHECKPOINTING
  dcpctl::register_torch_checkpointing();
#endif
#ifdef DCPCTL_WITH_LORA
  dcpctl::register_lora();  // no read of Python's needs it yet: registered so that the tables are the CLI's
#endif
  dcpctl::py::register_errors();
  dcpctl::py::bind_checkpoint(m);
  dcpctl::py::bind_commands(m);
  m.attr("__version__") = DCPCTL_VERSION;
}
