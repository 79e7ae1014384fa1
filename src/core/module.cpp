#include "core/module.h"

#include <dlfcn.h>

#include <filesystem>

namespace hc {

Result<std::filesystem::path> executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return Status::Error("cannot find the hotcold binary's directory (/proc/self/exe: " +
                         ec.message() + ")");
  return exe.parent_path();
}

Result<void*> open_module_entry(const char* file, const char* entry, const std::string& what,
                                const std::string& needed_for) {
  HC_ASSIGN_OR_RETURN(const std::filesystem::path bin, executable_dir());
  // Beside the binary (the build tree), else where `cmake --install` puts modules.
  std::error_code ec;
  std::string path = (bin / file).string();
  if (const std::filesystem::path installed = bin / ".." / "lib" / "hotcold" / file;
      !std::filesystem::exists(path, ec) && std::filesystem::exists(installed, ec))
    path = installed.lexically_normal().string();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    std::string why = err ? err : "unknown error";
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // dlerror names it too
    return Status::Error("cannot open the " + what + " " + path + ": " + why + " (" + needed_for +
                         ")");
  }
  void* sym = dlsym(lib, entry);
  if (!sym) {
    dlclose(lib);
    return Status::Error("the " + what + " " + path + " has no " + entry);
  }
  return sym;
}

}  // namespace hc
