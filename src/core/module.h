// Optional parts of hotcold built as modules beside the binary (libhotcold_http.so for serve,
// libhotcold_cuda.so for CUDA devices) and opened on first use, so a command that does not need
// one pays none of its load-time cost (cpp-httplib's OpenSSL set-up, cudart's kernel
// registration: megabytes of resident memory).
#pragma once
#include <filesystem>
#include <string>

#include "core/status.h"

namespace hc {

// dlopen(RTLD_NOW | RTLD_LOCAL: a symbol the module needs and the binary lacks fails here, with
// its name) of `file` in the running binary's directory (/proc/self/exe), or, when it is not
// there, in ../lib/hotcold from it (an installed hotcold), then dlsym of `entry`.
// The module stays open (its code is in use). Errors name the path, what failed, and
// `needed_for` ("hotcold serve needs it beside the binary; ...").
// The running binary's directory (/proc/self/exe): where the build puts the modules, and what
// an installed hotcold's share/ and lib/ are found from.
Result<std::filesystem::path> executable_dir();

Result<void*> open_module_entry(const char* file, const char* entry, const std::string& what,
                                const std::string& needed_for);

}  // namespace hc
