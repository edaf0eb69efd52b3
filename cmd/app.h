#pragma once

namespace dcpctl::cli {
// Parses argv, runs the chosen subcommand, maps library errors to exit codes.
int main(int argc, char** argv);
}  // namespace dcpctl::cli
