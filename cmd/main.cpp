// dcpctl: a thin command line over the dcpctl library. All work happens in src/.
#include "cmd/app.h"

int main(int argc, char** argv) {
  return dcpctl::cli::main(argc, argv);
}
