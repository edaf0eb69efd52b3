#include "cmd/app.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "build_info.h"
#include "cmd/commands.h"
#include "cmd/exit_codes.h"
#include "cmd/version.h"
#include "item/torch_file.h"
#include "modules/modules.h"
#include "store/upload.h"
#include "util/error.h"
#include "write/manifest.h"

namespace dcpctl::cli {

bool stderr_is_tty() {
  return ::isatty(2) == 1;
}

void build_app(CLI::App& app, RunFn& run) {
  register_modules();
  app.description(
      "dcpctl: inspect, verify, consolidate and reshard PyTorch Distributed Checkpoint (DCP) "
      "checkpoints without Python, a process group or a GPU.");
  app.name("dcpctl");
  app.require_subcommand(0, 1);
  app.set_version_flag("-V,--version", version_text(),
                       "Print dcpctl's version, the LibTorch version and whether CUDA is usable");
  app.footer(exit_codes_summary());
  for (const Command& c : commands()) c.setup(app, run);
}

int main(int argc, char** argv) {
  // What a signal's cleanup of uploads could not undo (store/upload.h), said on stderr.
  set_leftover_printer([](const char* sentence) {
    std::fputs("dcpctl: warning: ", stderr);
    std::fputs(sentence, stderr);
    std::fputc('\n', stderr);
  });
  install_item_readers();                     // the readers of torch.save zips (meta/readers.h)
  set_manifest_tool_version(DCPCTL_VERSION);  // what the manifests it writes record
  CLI::App app;
  RunFn run;
  build_app(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return static_cast<int>(ExitCode::usage);
  }
  if (!run) {
    std::cout << app.help();
    return static_cast<int>(ExitCode::usage);
  }
  try {
    return run();
  } catch (const Error& e) {
    std::cerr << "dcpctl: error: " << e.what() << "\n";
    for (const std::string& l : e.leftovers()) std::cerr << "dcpctl: warning: " << l << "\n";
    return static_cast<int>(e.exit_code());
  } catch (const std::bad_alloc&) {
    std::cerr << "dcpctl: error: out of memory\n";
    return static_cast<int>(ExitCode::failure);
  } catch (const std::exception& e) {
    std::cerr << "dcpctl: error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::failure);
  }
}

}  // namespace dcpctl::cli
