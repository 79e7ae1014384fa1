// The sandbox: everything the child needs (paths, argv, environment, the BPF program) is built
// before fork(), because between fork() and execve() a child of a multithreaded process may only
// make async-signal-safe calls: here raw system calls and plain stores, nothing that allocates.
#include "eval/sandbox.h"

#include <fcntl.h>
#include <ftw.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <system_error>
#include <vector>

#if !defined(__x86_64__)
#error "the sandbox's seccomp filter is written for x86-64"
#endif

namespace hc::eval {
namespace {

constexpr uid_t kNobody = 65534;
constexpr uint64_t kNproc = 256;  // tasks of uid nobody (threads count), when root was dropped

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// ---- the seccomp-BPF filter -------------------------------------------------------------------

// The program's own pid is only known in the child: the instructions comparing with it are
// patched there (plain stores into the child's copy) before the filter is installed.
struct Filter {
  std::vector<sock_filter> code;
  std::vector<size_t> self_slots;      // k = pid
  std::vector<size_t> neg_self_slots;  // k = -pid (its own process group, for kill())
};

Filter build_filter() {
  Filter f;
  auto& c = f.code;
  auto stmt = [&](uint16_t code, uint32_t k) { c.push_back(BPF_STMT(code, k)); };
  auto jeq = [&](uint32_t k, uint8_t jt, uint8_t jf) {
    c.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, k, jt, jf));
  };
  auto ret_errno = [](int e) { return SECCOMP_RET_ERRNO | (uint32_t(e) & SECCOMP_RET_DATA); };
  const uint32_t arg0 = offsetof(seccomp_data, args);  // low 32 bits (little endian)

  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jeq(AUDIT_ARCH_X86_64, 1, 0);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);  // i386 (int 0x80) or anything else
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
  c.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u /* x32 */, 0, 1));
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);

  // Denied outright. clone3 gets ENOSYS so that glibc's pthread_create falls back to clone(),
  // whose flags (unlike clone3's, behind a pointer) the filter can inspect.
  const std::pair<long, int> denied[] = {
    {__NR_fork, EPERM}, {__NR_vfork, EPERM},
#ifdef __NR_clone3
    {__NR_clone3, ENOSYS},
#endif
    {__NR_ptrace, EPERM}, {__NR_process_vm_readv, EPERM}, {__NR_process_vm_writev, EPERM},
    {__NR_kcmp, EPERM}, {__NR_tkill, EPERM},
    {__NR_mount, EPERM}, {__NR_umount2, EPERM}, {__NR_pivot_root, EPERM}, {__NR_chroot, EPERM},
    {__NR_unshare, EPERM}, {__NR_setns, EPERM},
#ifdef __NR_open_tree
    {__NR_open_tree, EPERM}, {__NR_move_mount, EPERM}, {__NR_fsopen, EPERM},
    {__NR_fsconfig, EPERM}, {__NR_fsmount, EPERM}, {__NR_fspick, EPERM},
#endif
#ifdef __NR_mount_setattr
    {__NR_mount_setattr, EPERM},
#endif
#ifdef __NR_pidfd_open
    {__NR_pidfd_open, EPERM},
#endif
#ifdef __NR_pidfd_send_signal
    {__NR_pidfd_send_signal, EPERM},
#endif
#ifdef __NR_pidfd_getfd
    {__NR_pidfd_getfd, EPERM},
#endif
#ifdef __NR_io_uring_setup  // io_uring can open sockets without the socket() system call
    {__NR_io_uring_setup, EPERM}, {__NR_io_uring_enter, EPERM}, {__NR_io_uring_register, EPERM},
#endif
    {__NR_kexec_load, EPERM}, {__NR_kexec_file_load, EPERM}, {__NR_init_module, EPERM},
    {__NR_finit_module, EPERM}, {__NR_delete_module, EPERM}, {__NR_reboot, EPERM},
    {__NR_swapon, EPERM}, {__NR_swapoff, EPERM}, {__NR_bpf, EPERM},
    {__NR_perf_event_open, EPERM}, {__NR_userfaultfd, EPERM}, {__NR_keyctl, EPERM},
    {__NR_add_key, EPERM}, {__NR_request_key, EPERM}, {__NR_name_to_handle_at, EPERM},
    {__NR_open_by_handle_at, EPERM}, {__NR_acct, EPERM}, {__NR_quotactl, EPERM},
    {__NR_settimeofday, EPERM}, {__NR_clock_settime, EPERM}, {__NR_clock_adjtime, EPERM},
    {__NR_adjtimex, EPERM}, {__NR_sethostname, EPERM}, {__NR_setdomainname, EPERM},
    {__NR_iopl, EPERM}, {__NR_ioperm, EPERM}, {__NR_syslog, EPERM}, {__NR_vhangup, EPERM},
    {__NR_personality, EPERM}, {__NR_fanotify_init, EPERM}, {__NR_migrate_pages, EPERM},
    {__NR_move_pages, EPERM}, {__NR_uselib, EPERM}, {__NR_lookup_dcookie, EPERM},
  };
  for (const auto& [nr, e] : denied) {
    jeq(uint32_t(nr), 0, 1);
    stmt(BPF_RET | BPF_K, ret_errno(e));
  }

  // clone(): threads only (CLONE_THREAD in the flags, args[0] on x86-64).
  jeq(__NR_clone, 0, 4);
  stmt(BPF_LD | BPF_W | BPF_ABS, arg0);
  c.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1));
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(BPF_RET | BPF_K, ret_errno(EPERM));

  // socket(): AF_UNIX only (no network even where no network namespace could be made).
  jeq(__NR_socket, 0, 4);
  stmt(BPF_LD | BPF_W | BPF_ABS, arg0);
  jeq(AF_UNIX, 0, 1);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(BPF_RET | BPF_K, ret_errno(EACCES));

  // kill(): only itself (0, its pid, its group): as root it could otherwise kill everything, as
  // nobody the other sandboxes.
  jeq(__NR_kill, 0, 6);
  stmt(BPF_LD | BPF_W | BPF_ABS, arg0);
  jeq(0, 3, 0);
  f.self_slots.push_back(c.size());
  jeq(0, 2, 0);
  f.neg_self_slots.push_back(c.size());
  jeq(0, 1, 0);
  stmt(BPF_RET | BPF_K, ret_errno(EPERM));
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

  // Signals to a thread group, and prlimit64(): only its own (prlimit64 pid 0 is glibc's
  // getrlimit / setrlimit).
  for (long nr : {long(__NR_tgkill), long(__NR_rt_sigqueueinfo), long(__NR_rt_tgsigqueueinfo)}) {
    jeq(uint32_t(nr), 0, 4);
    stmt(BPF_LD | BPF_W | BPF_ABS, arg0);
    f.self_slots.push_back(c.size());
    jeq(0, 1, 0);
    stmt(BPF_RET | BPF_K, ret_errno(EPERM));
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  jeq(__NR_prlimit64, 0, 5);
  stmt(BPF_LD | BPF_W | BPF_ABS, arg0);
  jeq(0, 2, 0);
  f.self_slots.push_back(c.size());
  jeq(0, 1, 0);
  stmt(BPF_RET | BPF_K, ret_errno(EPERM));
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return f;
}

// ---- the child's steps (async-signal-safe only) -----------------------------------------------

enum Step : int {
  kStepSetsid = 1, kStepStdio, kStepNetns, kStepMountns, kStepMountPrivate, kStepBind,
  kStepReadonly, kStepWritableDir, kStepChdir, kStepRlimit, kStepSetgroups, kStepSetgid,
  kStepSetuid, kStepNoNewPrivs, kStepSeccomp, kStepExec,
};

const char* step_name(int step) {
  switch (step) {
    case kStepSetsid: return "setsid";
    case kStepStdio: return "redirecting stdio";
    case kStepNetns: return "unshare(CLONE_NEWNET)";
    case kStepMountns: return "unshare(CLONE_NEWNS)";
    case kStepMountPrivate: return "making mounts private";
    case kStepBind: return "bind-mounting the sandbox directory";
    case kStepReadonly: return "making the file system read-only";
    case kStepWritableDir: return "making the sandbox directory writable";
    case kStepChdir: return "chdir to the sandbox directory";
    case kStepRlimit: return "setrlimit";
    case kStepSetgroups: return "setgroups";
    case kStepSetgid: return "setresgid(65534)";
    case kStepSetuid: return "setresuid(65534)";
    case kStepNoNewPrivs: return "prctl(PR_SET_NO_NEW_PRIVS)";
    case kStepSeccomp: return "installing the seccomp filter";
    case kStepExec: return "execve of python";
    default: return "unknown step";
  }
}

// A new network namespace has only a loopback interface, and it is down. Root makes one
// directly; anyone else inside a new user namespace, which also gives the rights that the
// mount namespace below needs.
int step_netns(bool root) {
  const int flags = root ? CLONE_NEWNET : (CLONE_NEWUSER | CLONE_NEWNET);
  return unshare(flags) == 0 ? 0 : kStepNetns;
}

// Own mount namespace (private, so nothing propagates back), the whole tree read-only, then the
// sandbox directory bind-mounted onto itself and made writable again.
int step_readonly_fs(const char* dir) {
  if (unshare(CLONE_NEWNS) != 0) return kStepMountns;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return kStepMountPrivate;
  if (mount(dir, dir, nullptr, MS_BIND | MS_REC, nullptr) != 0) return kStepBind;
  mount_attr ro{};
  ro.attr_set = MOUNT_ATTR_RDONLY;
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro) != 0) {
    return kStepReadonly;
  }
  mount_attr rw{};
  rw.attr_clr = MOUNT_ATTR_RDONLY;
  rw.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (syscall(SYS_mount_setattr, AT_FDCWD, dir, 0, &rw, sizeof rw) != 0) return kStepWritableDir;
  return 0;
}

// Raw system calls: glibc's setresuid() would signal the parent's other threads (setxid).
int step_drop_root() {
  if (syscall(SYS_setgroups, 0, nullptr) != 0) return kStepSetgroups;
  if (syscall(SYS_setresgid, kNobody, kNobody, kNobody) != 0) return kStepSetgid;
  if (syscall(SYS_setresuid, kNobody, kNobody, kNobody) != 0) return kStepSetuid;
  return 0;
}

int step_seccomp(Filter& f, pid_t self) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return kStepNoNewPrivs;
  for (size_t i : f.self_slots) f.code[i].k = uint32_t(self);
  for (size_t i : f.neg_self_slots) f.code[i].k = uint32_t(-self);
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(f.code.size());
  prog.filter = f.code.data();
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return kStepSeccomp;
  return 0;
}

struct ChildPlan {
  const char* python = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* dir = nullptr;
  int devnull = -1, out_w = -1, err_w = -1, status_w = -1;
  bool root = false, netns = false, readonly_fs = false, drop_root = false, seccomp = false;
  struct Limit {
    __rlimit_resource_t resource;
    rlimit value;
  };
  Limit limits[8];
  int n_limits = 0;
  Filter* filter = nullptr;
};

int redirect_stdio(const ChildPlan& p) {
  // Through high duplicates first, so that no dup2() overwrites a source still needed.
  const int in = fcntl(p.devnull, F_DUPFD_CLOEXEC, 10);
  const int out = fcntl(p.out_w, F_DUPFD_CLOEXEC, 10);
  const int err = fcntl(p.err_w, F_DUPFD_CLOEXEC, 10);
  if (in < 0 || out < 0 || err < 0) return kStepStdio;
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) return kStepStdio;
  // Every other descriptor closes at execve (the status pipe must stay open until then).
  if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 65536; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  return 0;
}

int child_steps(ChildPlan& p) {
  if (setsid() < 0) return kStepSetsid;
  if (int s = redirect_stdio(p)) return s;
  // Signals ignored or blocked by the parent would stay so across execve.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  }
  if (p.netns) {
    if (int s = step_netns(p.root)) return s;
  }
  if (p.readonly_fs) {
    if (int s = step_readonly_fs(p.dir)) return s;
  }
  if (chdir(p.dir) != 0) return kStepChdir;
  for (int i = 0; i < p.n_limits; ++i) {
    if (setrlimit(p.limits[i].resource, &p.limits[i].value) != 0) return kStepRlimit;
  }
  if (p.drop_root) {
    if (int s = step_drop_root()) return s;
  }
  if (p.seccomp) {
    if (int s = step_seccomp(*p.filter, getpid())) return s;
  }
  execve(p.python, p.argv, p.envp);
  return kStepExec;
}

[[noreturn]] void child_main(ChildPlan& p) {
  const int step = child_steps(p);
  const int msg[2] = {step, errno};
  ssize_t ignored = write(p.status_w, msg, sizeof msg);
  (void)ignored;
  _exit(127);
}

// ---- the probe ----------------------------------------------------------------------------------

SandboxCaps probe_caps() {
  SandboxCaps caps;
  const bool root = geteuid() == 0;
  char dir[] = "/tmp/hc-sandbox-probe-XXXXXX";
  const bool have_dir = mkdtemp(dir) != nullptr;
  Filter filter = build_filter();
  const pid_t pid = fork();
  if (pid == 0) {
    int bits = 0;
    setsid();
    if (step_netns(root) == 0) bits |= 1;
    if (have_dir && step_readonly_fs(dir) == 0) bits |= 2;
    if (root && step_drop_root() == 0) bits |= 4;
    if (step_seccomp(filter, getpid()) == 0) bits |= 8;
    _exit(0x40 | bits);
  }
  if (pid > 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && (WEXITSTATUS(status) & 0x40)) {
      const int bits = WEXITSTATUS(status);
      caps.net_namespace = bits & 1;
      caps.readonly_fs = bits & 2;
      caps.dropped_root = bits & 4;
      caps.seccomp = bits & 8;
    }
  }
  if (have_dir) rmdir(dir);
  return caps;
}

// ---- the parent's side --------------------------------------------------------------------------

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

Status make_pipe(Fd& r, Fd& w) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Error("sandbox: pipe2: " + errno_text(errno));
  r.fd = fds[0];
  w.fd = fds[1];
  return Status::Ok();
}

int remove_entry(const char* path, const struct stat*, int type, FTW*) {
  if (type == FTW_DP || type == FTW_DNR) {
    rmdir(path);
  } else {
    unlink(path);
  }
  return 0;  // go on: what cannot be removed now is retried after unlock_dir
}

int unlock_dir(const char* path, const struct stat*, int type, FTW*) {
  if (type == FTW_D || type == FTW_DNR) chmod(path, 0700);
  return 0;
}

// Removes the sandbox directory with everything the program left there. Without root, a
// directory the program made unreadable is first given back its permissions (a level per pass).
void remove_tree(const std::string& dir) {
  for (int pass = 0; pass < 16; ++pass) {
    nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0) return;
    nftw(dir.c_str(), unlock_dir, 16, FTW_PHYS);
  }
}

// The sandbox's directory, removed with its contents when this goes out of scope.
class SandboxDir {
 public:
  SandboxDir() = default;
  SandboxDir(const SandboxDir&) = delete;
  SandboxDir& operator=(const SandboxDir&) = delete;
  ~SandboxDir() {
    if (!path_.empty()) remove_tree(path_);
  }

  Status create(bool for_nobody) {
    char tmpl[] = "/tmp/hc-sandbox-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return Status::Error("sandbox: cannot make a directory /tmp/hc-sandbox-*: " +
                           errno_text(errno));
    }
    path_ = tmpl;
    if (for_nobody && chown(tmpl, kNobody, kNobody) != 0) {
      return Status::Error("sandbox: chown " + path_ + " to 65534: " + errno_text(errno));
    }
    return Status::Ok();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Status write_file(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("sandbox: cannot create " + path + ": " + errno_text(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      return Status::Error("sandbox: cannot write " + path + ": " + errno_text(e));
    }
    done += size_t(n);
  }
  close(fd);
  return Status::Ok();
}

// Every directory on the way and the file itself must be open to "others" for uid 65534.
Status check_runnable_by_nobody(const std::string& exe) {
  char buf[PATH_MAX];
  if (realpath(exe.c_str(), buf) == nullptr) {
    return Status::Error("sandbox: python '" + exe + "': " + errno_text(errno));
  }
  const std::string real = buf;
  for (size_t pos = real.find('/', 1); pos != std::string::npos; pos = real.find('/', pos + 1)) {
    const std::string d = real.substr(0, pos);
    struct stat st;
    if (stat(d.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH)) {
      return Status::Error("sandbox: python '" + exe + "' (" + real +
                           ") cannot be run by uid 65534 (nobody), which the sandbox runs as: " +
                           d + " is not searchable by others; use a python under /usr/bin");
    }
  }
  struct stat st;
  if (stat(real.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) {
    return Status::Error("sandbox: python '" + exe + "' (" + real +
                         ") is not executable by uid 65534 (nobody), which the sandbox runs as");
  }
  return Status::Ok();
}

Result<std::string> resolve_python(const std::string& python, bool for_nobody) {
  std::string exe;
  if (python.find('/') != std::string::npos) {
    if (access(python.c_str(), X_OK) != 0) {
      return Status::Error("sandbox: python '" + python + "' is not executable: " +
                           errno_text(errno));
    }
    exe = python;
  } else {
    for (const char* d : {"/usr/bin/", "/bin/"}) {
      if (access((d + python).c_str(), X_OK) == 0) {
        exe = d + python;
        break;
      }
    }
    if (exe.empty()) {
      return Status::Error("sandbox: '" + python +
                           "' not found in /usr/bin:/bin (the sandbox's PATH); install python3");
    }
  }
  if (for_nobody) HC_TRY(check_runnable_by_nobody(exe));
  return exe;
}

Status check_limits(const SandboxLimits& l) {
  if (!(l.wall_s > 0) || l.wall_s > 1e6) {
    return Status::Error("sandbox limits: wall_s must be > 0 (and sane), found " +
                         std::to_string(l.wall_s));
  }
  if (l.cpu_s < 1) {
    return Status::Error("sandbox limits: cpu_s must be >= 1, found " + std::to_string(l.cpu_s));
  }
  if (l.mem_bytes < (32ull << 20)) {
    return Status::Error("sandbox limits: mem_bytes must be >= 32 MiB (python must start), found " +
                         std::to_string(l.mem_bytes));
  }
  if (l.max_files < 8) {
    return Status::Error("sandbox limits: max_files must be >= 8, found " +
                         std::to_string(l.max_files));
  }
  return Status::Ok();
}

// The last `cap` bytes of a stream; memory stays below 2 * cap whatever the program prints.
class Tail {
 public:
  explicit Tail(size_t cap) : cap_(cap) {}
  void append(const char* p, size_t n) {
    if (n >= cap_) {
      buf_.assign(p + (n - cap_), cap_);
      return;
    }
    buf_.append(p, n);
    if (buf_.size() > 2 * cap_) buf_.erase(0, buf_.size() - cap_);
  }
  std::string take() {
    if (buf_.size() > cap_) buf_.erase(0, buf_.size() - cap_);
    return std::move(buf_);
  }

 private:
  size_t cap_;
  std::string buf_;
};

// Reads what is there; false at end of file (or error).
bool drain_once(int fd, Tail& tail) {
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      tail.append(buf, size_t(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

// The last non-empty line (python's exception line), shortened.
std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  const size_t nl = s.rfind('\n', end);
  const size_t begin = nl == std::string::npos ? 0 : nl + 1;
  std::string line = s.substr(begin, end + 1 - begin);
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  std::string s = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  switch (sig) {
    case SIGKILL:
    case SIGSEGV:
    case SIGBUS: return s + " (memory?)";
    case SIGXCPU: return s + " (CPU time limit)";
    case SIGXFSZ: return s + " (file size limit)";
    case SIGSYS: return s + " (seccomp)";
    default: return s;
  }
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

using Clock = std::chrono::steady_clock;

// Watches the started child: pipes drained through poll() (a full pipe never blocks it), the
// wall-clock limit enforced on the whole process group, which is killed in any case once the
// main process has exited (while it is still a zombie, so the group id cannot be reused).
SandboxResult supervise(pid_t pid, int out_r, int err_r, const SandboxLimits& limits,
                        Clock::time_point t0) {
  SandboxResult r;
  r.pid = pid;
  fcntl(out_r, F_SETFL, O_NONBLOCK);
  fcntl(err_r, F_SETFL, O_NONBLOCK);
  Fd pidfd;
  pidfd.fd = int(syscall(SYS_pidfd_open, pid, 0));  // -1 on kernels before 5.3: polled instead
  Tail out(limits.output_bytes), err(limits.output_bytes);
  bool out_open = true, err_open = true, exited = false, timed_out = false;
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(limits.wall_s));
  while (!exited) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0, i_out = -1, i_err = -1, i_pid = -1;
    if (out_open) fds[i_out = n++] = {out_r, POLLIN, 0};
    if (err_open) fds[i_err = n++] = {err_r, POLLIN, 0};
    if (pidfd.fd >= 0) fds[i_pid = n++] = {pidfd.fd, POLLIN, 0};
    const int wait_ms = int(std::min<int64_t>(left.count(), pidfd.fd >= 0 ? 1 << 30 : 10));
    if (poll(fds, nfds_t(n), wait_ms) < 0 && errno != EINTR) break;
    if (i_out >= 0 && fds[i_out].revents) out_open = drain_once(out_r, out);
    if (i_err >= 0 && fds[i_err].revents) err_open = drain_once(err_r, err);
    if (i_pid < 0 || fds[i_pid].revents) {
      siginfo_t info{};
      if (waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
        exited = true;
      }
    }
  }
  kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Every writer is dead now, so the pipes reach end of file at once; bounded all the same.
  const auto drain_until = Clock::now() + std::chrono::seconds(2);
  while ((out_open || err_open) && Clock::now() < drain_until) {
    pollfd fds[2];
    int n = 0, i_out = -1, i_err = -1;
    if (out_open) fds[i_out = n++] = {out_r, POLLIN, 0};
    if (err_open) fds[i_err = n++] = {err_r, POLLIN, 0};
    if (poll(fds, nfds_t(n), 100) < 0 && errno != EINTR) break;
    if (i_out >= 0 && fds[i_out].revents) out_open = drain_once(out_r, out);
    if (i_err >= 0 && fds[i_err].revents) err_open = drain_once(err_r, err);
  }
  r.out = out.take();
  r.err = err.take();

  if (timed_out) {
    r.outcome = Outcome::kTimeout;
    r.signal = SIGKILL;
    r.detail = "timeout after " + seconds_text(limits.wall_s) + " s";
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
    if (r.exit_code == 0) {
      r.outcome = Outcome::kPassed;
    } else {
      r.outcome = Outcome::kFailed;
      r.detail = "exit " + std::to_string(r.exit_code);
      const std::string why = last_line(r.err);
      if (!why.empty()) r.detail += ": " + why;
    }
  } else if (WIFSIGNALED(status)) {
    r.outcome = Outcome::kFailed;
    r.signal = WTERMSIG(status);
    r.detail = "killed by " + signal_text(r.signal);
  } else {
    r.outcome = Outcome::kError;
    r.detail = "sandbox: lost track of the child process";
  }
  return r;
}

// Reads the child's setup report: end of file once execve succeeded, or {step, errno}.
bool setup_failed(int status_r, int* step, int* err) {
  int msg[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof msg) {
    const ssize_t n = read(status_r, reinterpret_cast<char*>(msg) + got, sizeof msg - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  if (got < sizeof msg) return false;
  *step = msg[0];
  *err = msg[1];
  return true;
}

}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kPassed: return "passed";
    case Outcome::kFailed: return "failed";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kError: return "error";
  }
  return "error";
}

SandboxCaps sandbox_caps() {
  static const SandboxCaps caps = probe_caps();
  return caps;
}

std::string describe(const SandboxCaps& caps) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(caps.net_namespace, "net_namespace");
  add(caps.seccomp, "seccomp");
  add(caps.dropped_root, "dropped_root");
  add(caps.readonly_fs, "readonly_fs");
  return s.empty() ? "none" : s;
}

Result<SandboxResult> run_python(const std::string& program, const SandboxLimits& limits,
                                 const std::string& python) {
  HC_TRY(check_limits(limits));
  const SandboxCaps caps = sandbox_caps();
  HC_ASSIGN_OR_RETURN(const std::string exe, resolve_python(python, caps.dropped_root));
  SandboxDir dir;
  HC_TRY(dir.create(caps.dropped_root));
  const std::string script = dir.path() + "/main.py";
  HC_TRY(write_file(script, program));

  // Everything the child uses, built now (no allocation after fork).
  std::vector<std::string> env_strings = {"PATH=/usr/bin:/bin", "HOME=" + dir.path(),
                                          "TMPDIR=" + dir.path(), "LANG=C.UTF-8",
                                          "PYTHONDONTWRITEBYTECODE=1"};
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = exe, arg_i = "-I", arg_b = "-B", arg_script = script;
  char* argv[] = {arg0.data(), arg_i.data(), arg_b.data(), arg_script.data(), nullptr};
  Filter filter = build_filter();

  Fd devnull, out_r, out_w, err_r, err_w, status_r, status_w;
  devnull.fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull.fd < 0) return Status::Error("sandbox: cannot open /dev/null: " + errno_text(errno));
  HC_TRY(make_pipe(out_r, out_w));
  HC_TRY(make_pipe(err_r, err_w));
  HC_TRY(make_pipe(status_r, status_w));

  ChildPlan plan;
  plan.python = exe.c_str();
  plan.argv = argv;
  plan.envp = envp.data();
  plan.dir = dir.path().c_str();
  plan.devnull = devnull.fd;
  plan.out_w = out_w.fd;
  plan.err_w = err_w.fd;
  plan.status_w = status_w.fd;
  plan.root = geteuid() == 0;
  plan.netns = caps.net_namespace;
  plan.readonly_fs = caps.readonly_fs;
  plan.drop_root = caps.dropped_root;
  plan.seccomp = caps.seccomp;
  plan.filter = &filter;
  auto add_limit = [&](__rlimit_resource_t resource, uint64_t soft, uint64_t hard) {
    plan.limits[plan.n_limits++] = {resource, {rlim_t(soft), rlim_t(hard)}};
  };
  add_limit(RLIMIT_AS, limits.mem_bytes, limits.mem_bytes);
  add_limit(RLIMIT_CPU, uint64_t(limits.cpu_s), uint64_t(limits.cpu_s) + 1);
  add_limit(RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes);
  add_limit(RLIMIT_NOFILE, uint64_t(limits.max_files), uint64_t(limits.max_files));
  add_limit(RLIMIT_CORE, 0, 0);
  if (caps.dropped_root) add_limit(RLIMIT_NPROC, kNproc, kNproc);  // not enforced for root

  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) return Status::Error("sandbox: fork: " + errno_text(errno));
  if (pid == 0) child_main(plan);
  out_w.reset();
  err_w.reset();
  status_w.reset();

  int step = 0, err = 0;
  if (setup_failed(status_r.fd, &step, &err)) {
    kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    SandboxResult r;
    r.pid = pid;
    r.outcome = Outcome::kError;
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    r.detail = std::string("sandbox setup failed: ") + step_name(step) + ": " + errno_text(err);
    if (step == kStepExec) r.detail += " (" + exe + ")";
    return r;
  }
  return supervise(pid, out_r.fd, err_r.fd, limits, t0);
}

}  // namespace hc::eval
