/* The CUDA driver table against a real libcuda: with $CTIMM_LIBCUDA at the
 * toolkit's stub (which exports every driver entry point but has no GPU
 * behind it), every symbol of the table resolves and cuInit's stub error is
 * reported as "no GPU driver"; a missing library is reported by name. On a
 * machine with a GPU driver (libcuda.so.1), the device is listed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/cuda/driver.h"

static const char *const stub = "/usr/local/cuda/lib64/stubs/libcuda.so";

int main(void)
{
    CudaDriver d;
    CtErr err;
    setenv("CTIMM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    CHECK(cuda_driver_open(&d, &err) != 0);
    CHECKF(strstr(err.msg, "no CUDA driver") && strstr(err.msg, "/nonexistent/libcuda.so.1"), "%s", err.msg);
    CHECK(d.lib == NULL);
    if (access(stub, R_OK) == 0) {
        setenv("CTIMM_LIBCUDA", stub, 1);
        CHECK(cuda_driver_open(&d, &err) != 0);
        CHECKF(strstr(err.msg, "stub, not a driver"), "every entry point resolves, cuInit says stub: %s", err.msg);
    } else {
        printf("test_cuda_driver: no CUDA toolkit stub at %s; the symbol table is not checked\n", stub);
    }
    unsetenv("CTIMM_LIBCUDA");
    char why[512] = "";
    int usable = cuda_backend_usable(why, sizeof why);
    printf("test_cuda_driver: --device cuda here: %s\n", usable ? "runs" : why);
    CHECK(usable || why[0] != 0);
    return check_done("test_cuda_driver");
}
