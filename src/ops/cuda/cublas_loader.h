// cuBLAS, opened with dlopen when the first CUDA device opens instead of linked: linking
// libcublas / libcublasLt maps and relocates ~200 MiB into every hotcold process (measured:
// `hotcold --help` went from 8 MiB to 219 MiB peak RSS), which would break the RSS budget of
// every CPU-only run. Only the five calls the CUDA device makes are resolved.
#pragma once
#include <cublas_v2.h>

#include "core/status.h"

namespace hc::ops::cuda::cublas {

// Opens libcublas.so.13 (or libcublas.so) once; an error names the library and dlerror().
Status load();

cublasStatus_t create(cublasHandle_t* handle);
cublasStatus_t destroy(cublasHandle_t handle);
cublasStatus_t set_stream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t set_workspace(cublasHandle_t handle, void* workspace, size_t bytes);
cublasStatus_t gemm_ex(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                       int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                       int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                       void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                       cublasGemmAlgo_t algo);
const char* status_string(cublasStatus_t status);

}  // namespace hc::ops::cuda::cublas
