// The unit tests' main (Catch2's), and a listener that writes how many assertions the run made to
// the test's check ledger (DCPCTL_CHECK_LEDGER, set by tests/counted.sh; tests/ledger.py's twin):
// a CTest test that ran no assertion (a file tag matching no case) fails there and in ledger-judge;
// --warn NoAssertions fails a case without one here (docs/testing.md#no-test-passes-on-nothing).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

namespace {

struct LedgerListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testRunEnded(Catch::TestRunStats const& stats) override {
    const char* path = std::getenv("DCPCTL_CHECK_LEDGER");
    if (path == nullptr || *path == '\0') return;
    std::ofstream(path, std::ios::app) << "checks " << stats.totals.assertions.total() << " Catch2 assertions in "
                                       << stats.totals.testCases.total() << " test cases\n";
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(LedgerListener)
