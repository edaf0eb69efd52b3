// Temporaries of dead runs: their names, and finding and removing those a killed run left.
//
// A local output is written under a temporary name beside its final one (write/output.h) and a
// failed or signalled run removes it; only SIGKILL (an OOM kill, a scheduler's kill -9) or a power
// cut leaves it. The name says whose it is:
//
//   .<name>.dcpctl-tmp-<pid>-<start>@<host>        the output being written (a file or a folder)
//   .<name>.dcpctl-tmp-<pid>-<start>-old@<host>    an old output moved aside while being replaced
//
// <pid> is the writing process, <start> its start time (field 22 of /proc/<pid>/stat: clock ticks
// since boot; 0 where /proc cannot tell), <host> its host name (letters, digits, '.', '-', '_'
// kept, any other byte '_', at most 64 of them) followed by `~<inode>` of its PID namespace where
// that is not the host's own (a container), because a PID means something only there. Older
// dcpctl wrote `.<name>.dcpctl-tmp-<pid>` (and `-old`), with no host.
//
// A leftover is removed only when all of this holds:
//   - its name is exactly one of the above, for the output's own name (or, for prune, any name);
//   - it was written on this host and PID namespace (a shared filesystem shows other nodes'
//     temporaries under names that look the same, and their PIDs mean nothing here);
//   - its process is gone: kill(pid, 0) fails with ESRCH, or a process holds the PID but started
//     at another time than the name records (the PID was reused).
// Everything else is left and named: a live run's temporary, another host's, an older dcpctl's
// (no host recorded), and an old output moved aside (`-old`: it may be the only copy of the
// previous output; move it back or remove it by hand). Removal never follows a symbolic link.
// Object-storage outputs have no temporary name (store/upload.h): what a killed run leaves there
// is an unfinished multipart upload, invisible to a listing of objects and billed until aborted.
// So a run writing to `s3://`/`gs://` writes a record before its first upload begins: an object
// under the temporary's name (`<parent>/.<name>.dcpctl-tmp-<pid>-<start>@<host>`, a small JSON),
// deleted once none of its uploads is open (UploadSession::journal_in). A later run into the same
// output lists the records named for it. When each is a dead process's by the rules above, it
// aborts the uploads open under the output (the object itself and those below its prefix, as the
// store lists them: store::ObjectStore::open_uploads) and deletes the records, saying so. A record
// of a live process, another host or a container is named, and then nothing is aborted: the open
// uploads of two runs of the same output cannot be told apart.
//
// How this fits the existing checks: objects a killed run completed (a folder's first files) are
// objects like any other: the next run into that prefix is refused without --force, as for a local
// output that exists.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dcpctl {

// This process's temporary for `final_path` (a trailing '/' ignored): `dir/.NAME.dcpctl-tmp-...`.
std::string temp_name(const std::string& final_path);
// This process's record of its uploads into an object-storage output (the temporary's name; see
// below), or "" for an output that is a whole bucket.
std::string upload_journal_name(const std::string& output_url);
// Where an old output is moved while a folder replaces it on a filesystem without RENAME_EXCHANGE.
std::string aside_name(const std::string& final_path);

struct Leftover {
  enum class Owner {
    Gone,       // its process is gone (this host): safe to remove
    Live,       // its process still runs (this host)
    OtherHost,  // written on another host or PID namespace: cannot tell from here
    Unknown,    // an older dcpctl's name, with no host recorded
  };
  std::string path;
  std::string output;  // the final name it was written for, beside it
  long long pid = 0;
  std::string host;    // as recorded ("" for an older name)
  bool aside = false;  // `-old`: an old output moved aside, never removed
  bool directory = false;
  uint64_t bytes = 0;  // what it holds (a folder's files, summed)
  Owner owner = Owner::Unknown;
  bool removable() const { return owner == Owner::Gone && !aside; }
  // What it is and why it goes or stays (its size included); describe() starts with its path.
  std::string reason() const;
  std::string describe() const { return path + ": " + reason(); }
};

// The temporaries beside `final_path` named for it or for its manifest (NAME.dcpctl-manifest.json).
std::vector<Leftover> find_leftovers(const std::string& final_path);
// Every dcpctl temporary directly inside `dir` (prune's run folder).
std::vector<Leftover> find_leftovers_in(const std::string& dir);

// Removes a removable leftover (never following a link). Throws IoError when it cannot; one that
// is already gone (another run removed it) is not an error.
void remove_leftover(const Leftover& l);

// Before a run writes `final_path`: removes the removable leftovers for it and says so through
// `note`, and names the others (`dry_run`: says what it would remove, removes nothing). A removal
// that fails is named too, and the run goes on.
// `keep`: a leftover this run resumes (write/resume.h), left where it is.
void clear_dead_temporaries(const std::string& final_path, bool dry_run,
                            const std::function<void(const std::string&)>& note, const std::string& keep = "");

// The same for an object-storage output (`s3://`, `gs://`): aborts the uploads dead runs left open
// under it and deletes their records, names the others' (see above). Failures are named and the
// run goes on.
void clear_dead_uploads(const std::string& output_url, bool dry_run,
                        const std::function<void(const std::string&)>& note);

}  // namespace dcpctl
