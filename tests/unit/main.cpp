// The unit tests' main (Catch2's), and a listener that writes how many assertions the run made to
// the test's check ledger (DCPCTL_CHECK_LEDGER, set by tests/counted.sh; tests/ledger.py's twin):
// a CTest test that ran no assertion (a file tag matching no case) fails there and in ledger-judge;
// --warn NoAssertions fails a case without one here (docs/testing.md#no-test-passes-on-nothing).
// The listener also registers the modules this build holds before any case runs, as the binary
// does before its command line (src/modules/modules.cpp): each CTest test runs one file's cases, so no case
// may count on another file's having registered them (a .gguf opened by open_checkpoint is refused
// as a layout whose module is left out until register_gguf() has run).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#ifdef DCPCTL_WITH_GGUF
#include "gguf/register.h"
#endif

namespace {

struct LedgerListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
#ifdef DCPCTL_WITH_GGUF
    dcpctl::register_gguf();
#endif
  }

  void testRunEnded(Catch::TestRunStats const& stats) override {
    const char* path = std::getenv("DCPCTL_CHECK_LEDGER");
    if (path == nullptr || *path == '\0') return;
    std::ofstream(path, std::ios::app) << "checks " << stats.totals.assertions.total() << " Catch2 assertions in "
                                       << stats.totals.testCases.total() << " test cases\n";
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(LedgerListener)
