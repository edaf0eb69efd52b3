#include <iostream>

#include "cmd/subcommands.h"
#include "meta/checkpoint.h"

namespace dcpctl::cli {

struct InspectOptions {
  std::string checkpoint;
};

int run_inspect(const InspectOptions& o) {
  Checkpoint ck = open_checkpoint(o.checkpoint);
  std::cout << "tensors: " << ck.md.tensors.size() << "\nbytes items: " << ck.md.bytes.size() << "\n";
  for (const auto& t : ck.md.tensors) std::cout << t.fqn << " " << t.dtype_name << " chunks=" << t.num_chunks() << "\n";
  return 0;
}

void setup_inspect(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<InspectOptions>();
  auto* sub = parent.add_subcommand("inspect", "Show what a checkpoint holds and how it is sharded");
  sub->add_option("checkpoint", o->checkpoint, "Checkpoint directory (holds .metadata)")->required();
  sub->callback([&run, o] { run = [o] { return run_inspect(*o); }; });
}

}  // namespace dcpctl::cli
