#include "ops/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace hc::ops::cuda::cublas {

namespace {

struct Api {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // cublasGemmEx is overloaded in C++ (cublas_api.h): spelled out.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

Api g_api;
Status g_status = Status::Error("cuBLAS not loaded");
std::once_flag g_once;

template <class F>
bool sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

Status open_library() {
  void* lib = nullptr;
  std::string tried;
  for (const char* name : {"libcublas.so.13", "libcublas.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* e = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + name + ": " + (e ? e : "?");
  }
  if (!lib) return Status::Error("cannot load cuBLAS (" + tried + ")");
  Api a;
  const bool ok = sym(lib, "cublasCreate_v2", &a.create) &&
                  sym(lib, "cublasDestroy_v2", &a.destroy) &&
                  sym(lib, "cublasSetStream_v2", &a.set_stream) &&
                  sym(lib, "cublasSetWorkspace_v2", &a.set_workspace) &&
                  sym(lib, "cublasGemmEx", &a.gemm_ex) &&
                  sym(lib, "cublasGetStatusString", &a.status_string);
  if (!ok) return Status::Error("cuBLAS library lacks an expected symbol (cublasCreate_v2, "
                                "cublasGemmEx, ...): a cuBLAS older than CUDA 12?");
  g_api = a;
  return Status::Ok();
}

}  // namespace

Status load() {
  std::call_once(g_once, [] { g_status = open_library(); });
  return g_status;
}

cublasStatus_t create(cublasHandle_t* h) {
  return load().ok() ? g_api.create(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t destroy(cublasHandle_t h) {
  return load().ok() ? g_api.destroy(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t set_stream(cublasHandle_t h, cudaStream_t s) {
  return load().ok() ? g_api.set_stream(h, s) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t set_workspace(cublasHandle_t h, void* w, size_t bytes) {
  return load().ok() ? g_api.set_workspace(h, w, bytes) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, const void* alpha, const void* A, cudaDataType at, int lda,
                       const void* B, cudaDataType bt, int ldb, const void* beta, void* C,
                       cudaDataType ct, int ldc, cublasComputeType_t comp,
                       cublasGemmAlgo_t algo) {
  if (!load().ok()) return CUBLAS_STATUS_NOT_INITIALIZED;
  return g_api.gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp,
                       algo);
}
const char* status_string(cublasStatus_t s) {
  return load().ok() ? g_api.status_string(s) : "cuBLAS not loaded";
}

}  // namespace hc::ops::cuda::cublas
