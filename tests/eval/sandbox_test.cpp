// The sandbox against hostile programs: each test runs real python3 and checks both what the
// program saw and that nothing escaped (processes, connections, files, signals).
#include "eval/sandbox.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace hc::eval {
namespace {

SandboxResult run(const std::string& program, const SandboxLimits& limits = {}) {
  Result<SandboxResult> r = run_python(program, limits);
  EXPECT_TRUE(r.ok()) << r.message();
  if (!r.ok()) return {};
  return std::move(r).value();
}

std::string show(const SandboxResult& r) {
  return std::string(outcome_name(r.outcome)) + " (" + r.detail + ")\nstdout: " + r.out +
         "\nstderr: " + r.err;
}

bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// The pids of every process whose process group is pgid (fields after the ")" of
// /proc/<pid>/stat: state, ppid, pgrp).
std::vector<int> processes_in_group(int pgid) {
  std::vector<int> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    int ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid) pids.push_back(pid);
  }
  closedir(d);
  return pids;
}

// The first line of stdout (the programs below print their sandbox directory first).
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

TEST(Sandbox, ReportsItsCaps) {
  const SandboxCaps caps = sandbox_caps();
  RecordProperty("caps", describe(caps));
  std::printf("sandbox caps: %s\n", describe(caps).c_str());
  if (geteuid() == 0) {
    // Root can always drop to nobody: a sandbox that does not is broken, not limited.
    EXPECT_TRUE(caps.dropped_root);
  } else {
    EXPECT_FALSE(caps.dropped_root);
  }
}

TEST(Sandbox, PassingProgramPasses) {
  const SandboxResult r = run("import sys\nprint('hello')\nprint('to err', file=sys.stderr)\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_EQ(r.err, "to err\n");
  EXPECT_EQ(r.detail, "");
  EXPECT_GT(r.pid, 0);
  EXPECT_STREQ(outcome_name(Outcome::kPassed), "passed");
  EXPECT_STREQ(outcome_name(Outcome::kFailed), "failed");
  EXPECT_STREQ(outcome_name(Outcome::kTimeout), "timeout");
  EXPECT_STREQ(outcome_name(Outcome::kError), "error");
}

TEST(Sandbox, FailedAssertionFails) {
  const SandboxResult r = run("assert False\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("AssertionError"), std::string::npos) << r.err;
  EXPECT_EQ(r.detail, "exit 1: AssertionError");
}

TEST(Sandbox, ExitCodesAndSignalsAreReported) {
  SandboxResult r = run("import sys\nsys.exit(3)\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.detail, "exit 3");

  r = run("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_EQ(r.detail, "killed by SIGTERM");

  r = run("def f(:\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_NE(r.err.find("SyntaxError"), std::string::npos) << r.err;
}

TEST(Sandbox, StdinIsEmptyAndEnvironmentIsClean) {
  const SandboxResult r = run(
      "import os, sys\n"
      "assert sys.stdin.read() == ''\n"
      "print(os.getcwd())\n"
      "assert os.environ['HOME'] == os.getcwd(), os.environ\n"
      "assert os.environ['TMPDIR'] == os.getcwd(), os.environ\n"
      "assert os.environ['PATH'] == '/usr/bin:/bin', os.environ\n"
      "assert 'HC_SECRET_FOR_TEST' not in os.environ\n"
      "assert sorted(os.listdir('.')) == ['main.py'], os.listdir('.')\n"
      "assert os.listdir('/proc/self/fd') == ['0', '1', '2', '3'], os.listdir('/proc/self/fd')\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(first_line(r.out).rfind("/tmp/hc-sandbox-", 0), 0u) << r.out;
}

TEST(Sandbox, InfiniteLoopTimesOutAndLeavesNothing) {
  SandboxLimits limits;
  limits.wall_s = 2;
  limits.cpu_s = 60;
  const SandboxResult r = run("import os\nprint(os.getcwd(), flush=True)\nwhile True: pass\n", limits);
  EXPECT_EQ(r.outcome, Outcome::kTimeout) << show(r);
  EXPECT_EQ(r.detail, "timeout after 2 s");
  EXPECT_GE(r.wall_s, 2.0);
  EXPECT_LT(r.wall_s, 3.0);
  const std::string dir = first_line(r.out);
  ASSERT_EQ(dir.rfind("/tmp/hc-sandbox-", 0), 0u) << r.out;
  EXPECT_FALSE(exists(dir)) << dir;
  EXPECT_FALSE(exists("/proc/" + std::to_string(r.pid))) << "the child was not reaped";
  EXPECT_TRUE(processes_in_group(r.pid).empty());
}

TEST(Sandbox, ClosedStdoutDoesNotEndTheWatch) {
  SandboxLimits limits;
  limits.wall_s = 1;
  const SandboxResult r = run("import os\nos.close(1)\nos.close(2)\nwhile True: pass\n", limits);
  EXPECT_EQ(r.outcome, Outcome::kTimeout) << show(r);
  EXPECT_LT(r.wall_s, 2.0);
}

TEST(Sandbox, CpuLimitKills) {
  SandboxLimits limits;
  limits.wall_s = 10;
  limits.cpu_s = 1;
  const SandboxResult r = run("while True: pass\n", limits);
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_EQ(r.signal, SIGXCPU);
  EXPECT_EQ(r.detail, "killed by SIGXCPU (CPU time limit)");
  EXPECT_LT(r.wall_s, 5.0);
}

TEST(Sandbox, DaemonThreadDoesNotOutliveTheProgram) {
  const SandboxResult r = run(
      "import threading, time\n"
      "def spin():\n"
      "    while True: time.sleep(0.01)\n"
      "threading.Thread(target=spin, daemon=True).start()\n"
      "print('main done')\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_LT(r.wall_s, 5.0);
  EXPECT_TRUE(processes_in_group(r.pid).empty());
}

TEST(Sandbox, ForkBombIsContained) {
  const SandboxCaps caps = sandbox_caps();
  if (!caps.seccomp && !caps.dropped_root) GTEST_SKIP() << "no seccomp and no RLIMIT_NPROC here";
  SandboxLimits limits;
  limits.wall_s = 5;
  const SandboxResult r = run("import os\nwhile True: os.fork()\n", limits);
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  if (caps.seccomp) {
    EXPECT_NE(r.err.find("PermissionError"), std::string::npos) << r.err;
    EXPECT_LT(r.wall_s, 2.0);
  } else {
    EXPECT_NE(r.err.find("Error"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(processes_in_group(r.pid).empty());

  // The other ways to a new process: subprocess (vfork-style clone), posix_spawn.
  const SandboxResult sub = run("import subprocess\nsubprocess.run(['/bin/true'])\n");
  EXPECT_EQ(sub.outcome, Outcome::kFailed) << show(sub);
  EXPECT_TRUE(processes_in_group(sub.pid).empty());
  const SandboxResult spawn = run("import os\nos.posix_spawn('/bin/true', ['true'], {})\n");
  EXPECT_EQ(spawn.outcome, Outcome::kFailed) << show(spawn);
}

TEST(Sandbox, ThreadsWork) {
  const SandboxResult r = run(
      "import threading\n"
      "out = [0] * 4\n"
      "def work(i):\n"
      "    out[i] = sum(range(i * 1000))\n"
      "ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]\n"
      "for t in ts: t.start()\n"
      "for t in ts: t.join()\n"
      "print(out)\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(r.out, "[0, 499500, 1999000, 4498500]\n");
}

TEST(Sandbox, StandardLibraryOfTheBenchmarksWorks) {
  const SandboxResult r = run(
      "import math, re, collections, itertools, heapq, functools, bisect, string, random\n"
      "import statistics, fractions, decimal, hashlib, json, copy, operator, sys, typing\n"
      "import datetime, array, struct, cmath, threading, queue, textwrap, unicodedata\n"
      "assert heapq.nsmallest(2, [5, 1, 3]) == [1, 3]\n"
      "assert re.findall(r'\\d+', 'a1b22') == ['1', '22']\n"
      "assert collections.Counter('aab')['a'] == 2\n"
      "assert math.isclose(math.sqrt(2) ** 2, 2)\n"
      "assert hashlib.md5(b'').hexdigest() == 'd41d8cd98f00b204e9800998ecf8427e'\n"
      "assert len(list(itertools.permutations(range(4)))) == 24\n"
      "random.seed(1); random.random()\n"
      "import tempfile\n"
      "with tempfile.NamedTemporaryFile() as f: f.write(b'x')\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
}

TEST(Sandbox, NetworkIsUnreachable) {
  // A listening socket of the test itself: the program must not reach it.
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  const SandboxResult r = run(
      "import socket\n"
      "s = socket.create_connection(('127.0.0.1', " + std::to_string(port) + "), timeout=2)\n"
      "print('connected')\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_EQ(r.out.find("connected"), std::string::npos);
  EXPECT_NE(r.err.find("Error"), std::string::npos) << r.err;

  for (const char* family : {"AF_INET", "AF_INET6", "AF_PACKET", "AF_NETLINK"}) {
    const SandboxResult s = run(std::string("import socket\nsocket.socket(socket.") + family +
                                ", socket.SOCK_DGRAM)\n");
    EXPECT_EQ(s.outcome, Outcome::kFailed) << family << ": " << show(s);
    if (sandbox_caps().seccomp) {
      EXPECT_NE(s.err.find("PermissionError"), std::string::npos) << family << ": " << s.err;
    }
  }
  // The listener never saw a connection.
  EXPECT_LT(accept(listener, nullptr, nullptr), 0);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno;
  close(listener);

  // Local sockets (AF_UNIX) stay allowed: some standard library code uses them.
  const SandboxResult unix_ok = run(
      "import socket\na, b = socket.socketpair()\na.sendall(b'x')\nassert b.recv(1) == b'x'\n");
  EXPECT_EQ(unix_ok.outcome, Outcome::kPassed) << show(unix_ok);
}

TEST(Sandbox, OwnNetworkNamespaceHasOnlyLoopback) {
  if (!sandbox_caps().net_namespace) GTEST_SKIP() << "no network namespace on this platform";
  const SandboxResult r = run(
      "names = [l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]]\n"
      "print(' '.join(names))\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(r.out, "lo\n");
}

TEST(Sandbox, SeccompAndNoNewPrivsAreOn) {
  const SandboxCaps caps = sandbox_caps();
  if (!caps.seccomp) GTEST_SKIP() << "no seccomp on this platform";
  const SandboxResult r = run(
      "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
      "print(st['Seccomp'].strip(), st['NoNewPrivs'].strip(), st['Uid'].split()[0])\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(r.out, std::string("2 1 ") + (caps.dropped_root ? "65534" : std::to_string(getuid())) +
                       "\n");
}

TEST(Sandbox, CannotSignalOtherProcesses) {
  if (!sandbox_caps().seccomp && !sandbox_caps().dropped_root) GTEST_SKIP() << "no isolation";
  // Signal 0 only checks permission: harmless even if the sandbox were broken.
  const SandboxResult r = run("import os\nos.kill(os.getpid(), 0)\nos.kill(" +
                              std::to_string(getpid()) + ", 0)\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_NE(r.err.find("PermissionError"), std::string::npos) << r.err;
  const SandboxResult all = run("import os\nos.kill(-1, 0)\n");
  EXPECT_EQ(all.outcome, Outcome::kFailed) << show(all);
}

TEST(Sandbox, HugeAllocationFailsWithMemoryError) {
  rlimit before{};
  getrlimit(RLIMIT_AS, &before);
  const SandboxResult r = run("x = bytearray(8 << 30)\nprint(len(x))\n");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("MemoryError"), std::string::npos) << r.err;
  EXPECT_EQ(r.detail, "exit 1: MemoryError");
  // The limit was the child's alone.
  rlimit after{};
  getrlimit(RLIMIT_AS, &after);
  EXPECT_EQ(after.rlim_cur, before.rlim_cur);
  std::vector<char> big(64 << 20, 1);
  EXPECT_EQ(big.back(), 1);
}

TEST(Sandbox, FileSizeLimitStopsABigFile) {
  SandboxLimits limits;
  limits.file_bytes = 1 << 20;
  const SandboxResult r = run(
      "import os\n"
      "with open('big', 'wb') as f:\n"
      "    for _ in range(100):\n"
      "        f.write(b'x' * (1 << 20))\n"
      "        f.flush()\n",
      limits);
  EXPECT_EQ(r.outcome, Outcome::kFailed) << show(r);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
}

TEST(Sandbox, OutputFloodIsTruncatedToItsTail) {
  SandboxLimits limits;
  limits.wall_s = 8;
  const SandboxResult flood = run(
      "import sys, time\n"
      "t = time.time()\n"
      "while time.time() - t < 1:\n"
      "    print('x' * 99)\n"
      "    print('e' * 99, file=sys.stderr)\n"
      "print('end')\n",
      limits);
  EXPECT_EQ(flood.outcome, Outcome::kPassed) << flood.detail;
  EXPECT_EQ(flood.out.size(), limits.output_bytes);
  EXPECT_EQ(flood.err.size(), limits.output_bytes);
  EXPECT_EQ(flood.out.substr(flood.out.size() - 4), "end\n");
  EXPECT_LT(flood.wall_s, 5.0);

  // The tail, not the head: the last 1,000 bytes of 0..199999.
  limits.output_bytes = 1000;
  const SandboxResult tail = run("for i in range(200000): print(i)\n", limits);
  EXPECT_EQ(tail.outcome, Outcome::kPassed) << tail.detail;
  ASSERT_EQ(tail.out.size(), 1000u);
  EXPECT_EQ(tail.out.substr(tail.out.size() - 14), "199998\n199999\n");
}

TEST(Sandbox, DirectoryIsRemovedWhateverWasLeftInIt) {
  const SandboxResult r = run(
      "import os\n"
      "print(os.getcwd())\n"
      "os.makedirs('a/b/c')\n"
      "open('a/b/c/f', 'w').write('x')\n"
      "os.makedirs('locked/inner')\n"
      "open('locked/inner/g', 'w').write('y')\n"
      "os.chmod('locked/inner', 0)\n"
      "os.chmod('locked', 0)\n"
      "os.symlink('/etc', 'etc_link')\n"
      "os.remove('main.py')\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  const std::string dir = first_line(r.out);
  ASSERT_EQ(dir.rfind("/tmp/hc-sandbox-", 0), 0u) << r.out;
  EXPECT_FALSE(exists(dir));
  EXPECT_TRUE(exists("/etc/passwd"));  // the symlink was not followed
}

TEST(Sandbox, DroppedRootCannotReadOrWriteOutside) {
  if (!sandbox_caps().dropped_root) GTEST_SKIP() << "not started as root";
  char tmpl[] = "/tmp/hc-sandbox-test-XXXXXX";  // root's, mode 0700
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string outside = std::string(tmpl) + "/escaped";
  const SandboxResult r = run(
      "import os\n"
      "assert os.getuid() == 65534 and os.getgid() == 65534 and os.getgroups() == []\n"
      "for what in [lambda: os.listdir('/root'), lambda: open('" + outside + "', 'w')]:\n"
      "    try:\n"
      "        what()\n"
      "        print('escaped')\n"
      "    except OSError as e:\n"
      "        print(type(e).__name__)\n"
      "open('inside', 'w').write('ok')\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(r.out.find("escaped"), std::string::npos) << r.out;
  EXPECT_FALSE(exists(outside));
  rmdir(tmpl);
}

TEST(Sandbox, FileSystemOutsideItsDirectoryIsReadOnly) {
  if (!sandbox_caps().readonly_fs) GTEST_SKIP() << "no mount namespace on this platform";
  const std::string outside = "/tmp/hc-sandbox-escape-" + std::to_string(getpid());
  const SandboxResult r = run(
      "import errno\n"
      "try:\n"
      "    open('" + outside + "', 'w')\n"
      "    print('escaped')\n"
      "except OSError as e:\n"
      "    print(errno.errorcode[e.errno])\n"
      "open('inside', 'w').write('ok')\n");
  EXPECT_EQ(r.outcome, Outcome::kPassed) << show(r);
  EXPECT_EQ(r.out, "EROFS\n");
  EXPECT_FALSE(exists(outside));
  unlink(outside.c_str());
}

TEST(Sandbox, ManyThreadsRunSandboxesAtOnce) {
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        const std::string want = std::to_string(t * 100 + i);
        Result<SandboxResult> r =
            run_python("import sys\nprint(" + want + ")\nsys.exit(0)\n", SandboxLimits{});
        if (r.ok() && r->outcome == Outcome::kPassed && r->out == want + "\n") {
          ++passed;
        } else {
          errors[size_t(t)] += (r.ok() ? show(*r) : r.message()) + "\n";
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(passed.load(), 16);
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(Sandbox, SandboxFailuresAreErrors) {
  Result<SandboxResult> r = run_python("print(1)\n", SandboxLimits{}, "/nonexistent/python3");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("/nonexistent/python3"), std::string::npos) << r.message();

  r = run_python("print(1)\n", SandboxLimits{}, "no-such-python-hc");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no-such-python-hc"), std::string::npos) << r.message();

  SandboxLimits bad;
  bad.wall_s = 0;
  r = run_python("print(1)\n", bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("wall_s"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace hc::eval
