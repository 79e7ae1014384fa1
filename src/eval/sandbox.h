// Runs untrusted Python (model-generated solutions of HumanEval / MBPP problems) in a sandbox:
// its own process group, session and temporary directory, resource limits, a network namespace,
// a read-only view of the file system outside its directory, a seccomp-BPF filter (no new
// processes, no sockets but AF_UNIX, no ptrace / mount / namespaces / kill of other processes)
// and, when started as root, the unprivileged uid/gid 65534 (nobody). Whatever the program does,
// it ends by the wall-clock limit, and its temporary directory is removed.
//
// Which of these layers the platform allows is probed once (sandbox_caps()); the limits and the
// process group are always there. Linux / x86-64 only.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"

namespace hc::eval {

struct SandboxLimits {
  double wall_s = 10;                 // wall-clock limit; then the whole process group gets SIGKILL
  int cpu_s = 10;                     // RLIMIT_CPU (soft: SIGXCPU; hard one second later: SIGKILL)
  uint64_t mem_bytes = 1ull << 30;    // RLIMIT_AS
  uint64_t file_bytes = 16ull << 20;  // RLIMIT_FSIZE
  int max_files = 64;                 // RLIMIT_NOFILE
  uint64_t output_bytes = 64 << 10;   // stdout/stderr kept (tail), the rest discarded (still drained)
};

// kError: the sandbox could not run it (setting up the isolation or exec of python failed in the
// child; detail says which step).
enum class Outcome { kPassed, kFailed, kTimeout, kError };
const char* outcome_name(Outcome o);  // "passed", "failed", "timeout", "error"

struct SandboxResult {
  Outcome outcome = Outcome::kError;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when killed by a signal (SIGKILL after a timeout included)
  double wall_s = 0;
  std::string out, err;  // tails, at most SandboxLimits::output_bytes each
  // One line: why it failed ("exit 1: AssertionError", "killed by SIGKILL (memory?)",
  // "timeout after 10 s", ...); empty when it passed.
  std::string detail;
  int pid = 0;  // the program's pid, which was also its process group and session id
};

// What isolation the platform gave (probed once in a child process, cached).
struct SandboxCaps {
  bool net_namespace = false;  // a new network namespace: only a loopback that is down
  bool seccomp = false;        // the seccomp-BPF filter (no fork, no sockets but AF_UNIX, ...)
  bool dropped_root = false;   // runs as uid/gid 65534 (only when started as root)
  bool readonly_fs = false;    // own mount namespace: everything but its directory read-only
};
SandboxCaps sandbox_caps();
// "net_namespace seccomp dropped_root readonly_fs" (the ones present), or "none".
std::string describe(const SandboxCaps& caps);

// Runs `program` as python3 source (written to a fresh temporary directory which is the cwd,
// HOME and TMPDIR, removed afterwards) under the limits, with stdin from /dev/null and
// python's isolated mode (-I -B). `python` is a path, or a name looked up in /usr/bin:/bin (the
// sandbox's PATH; with dropped_root it must be executable by nobody). Errors (Result not ok)
// only for failures of the sandbox itself (cannot fork, cannot make the tmpdir, no python);
// the program's own failure is an Outcome. Safe to call from several threads at once.
Result<SandboxResult> run_python(const std::string& program, const SandboxLimits& limits,
                                 const std::string& python = "python3");

}  // namespace hc::eval
