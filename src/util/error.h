// The library's small exception hierarchy. Every error names where it happened (file, byte
// offset, tensor key) so that a user can find the bad bytes; the CLI maps each class to a
// documented exit code (see exit_code()).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dcpctl {

// Exit codes are part of the interface (README, docs/commands.md, man page).
enum class ExitCode : int {
  ok = 0,
  failure = 1,
  usage = 2,
  invalid = 3,      // checkpoint invalid or incomplete
  io = 4,           // I/O error (missing file, read/write failure, disk full)
  unsupported = 5,  // valid input we do not handle (or no GPU for a GPU command)
};

// Where an error was found. Every field is optional; what is known is printed.
struct Where {
  std::string file;
  std::optional<uint64_t> offset;
  std::string key;

  Where() = default;
  explicit Where(std::string f, std::optional<uint64_t> off = std::nullopt, std::string k = {})
      : file(std::move(f)), offset(off), key(std::move(k)) {}
  std::string describe() const;  // "ckpt/__0_0.distcp: offset 123: key 'w'"
};

class Error : public std::runtime_error {
 public:
  Error(Where where, const std::string& what);
  const Where& where() const { return where_; }
  const std::string& detail() const { return detail_; }
  virtual ExitCode exit_code() const { return ExitCode::failure; }
  // What the failed command could not undo (an upload left open, an object left behind: one
  // sentence each), for the command line to print after the error.
  const std::vector<std::string>& leftovers() const { return leftovers_; }
  void add_leftover(std::string sentence) { leftovers_.push_back(std::move(sentence)); }

 private:
  Where where_;
  std::string detail_;
  std::vector<std::string> leftovers_;
};

// The checkpoint (or a file in it) is malformed, inconsistent or incomplete.
class FormatError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::invalid; }
};

// Bytes that fail a check their writer recorded (a record's CRC-32): the checkpoint is damaged.
// Exit 3 like any invalid checkpoint; a class of its own so that verify can name the finding.
class CorruptError : public FormatError {
 public:
  using FormatError::FormatError;
};

// The operating system refused: missing file, short read, failed write, full disk.
class IoError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::io; }
};

// Well-formed input that this version does not handle.
class UnsupportedError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::unsupported; }
};

// A caller asked for something impossible (bad dtype name, conflicting options).
class UsageError : public Error {
 public:
  using Error::Error;
  ExitCode exit_code() const override { return ExitCode::usage; }
};

// Throws the class that maps to `code` (an error reported by another process keeps its exit code).
[[noreturn]] inline void throw_error(ExitCode code, Where where, const std::string& what) {
  switch (code) {
    case ExitCode::invalid: throw FormatError(std::move(where), what);
    case ExitCode::io: throw IoError(std::move(where), what);
    case ExitCode::unsupported: throw UnsupportedError(std::move(where), what);
    case ExitCode::usage: throw UsageError(std::move(where), what);
    default: throw Error(std::move(where), what);
  }
}

// The exit code an exception maps to (the CLI's mapping: an Error's own code, else failure).
inline ExitCode exit_code_of(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err ? err->exit_code() : ExitCode::failure;
}

// errno text for IoError messages.
std::string errno_text(int err);

}  // namespace dcpctl
