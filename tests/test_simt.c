/* The SIMT harness (runtime/cuda_sim/simt.h): CUDA C run on the host.
 * A block reduction with its barriers gives the exact sum under every
 * seed, and without the barrier of its loop gives different sums for
 * different seeds (the randomised order finds a missing __syncthreads),
 * the same under one seed twice; shared memory, static and dynamic, reads
 * as NaN before it is written, in every block; warp shuffles, votes and
 * reductions give CUDA's results, in a full warp and a partial last one;
 * atomics of 2048 threads across barriers sum exactly; __float2half and
 * __float2bfloat16 give the host's bits (ties to even, subnormals,
 * overflow, NaN); a barrier some threads never reach, a warp operation
 * waiting for a thread at a barrier, a bad mask and __trap fail the
 * launch with a message (no hang, no abort) and the module runs again
 * afterwards; the cuda target's real texts compile unchanged behind the
 * prelude (a test model's generated kernels in bf16 AMP, channels_last,
 * and the library kernels) and a small graph's generated kernels and some
 * library kernels, launched as the executor launches them over grids of
 * several blocks, equal the ref backend; an out-of-bounds store past a
 * guarded buffer dies with ASan's report naming the kernel (in a child
 * process, in the sanitizer build only). Compiles into a mkdtemp kernel
 * cache under /tmp. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "codegen/cuda/lib_launch.h"
#include "codegen/cuda/lib_source.h"
#include "codegen/render.h"
#include "model_graphs.h"
#include "runtime/backend.h"
#include "runtime/cuda_sim/simt.h"

/* The test kernels: CUDA C as NVRTC would take it. */
static const char kernels[] =
    "#define BLOCK_SUM(NAME, LOOP_SYNC) \\\n"
    "extern \"C\" __global__ void NAME(const float *x, float *out, int n) \\\n"
    "{ \\\n"
    "    __shared__ float s[256]; \\\n"
    "    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t; \\\n"
    "    s[t] = i < n ? x[i] : 0.0f; \\\n"
    "    __syncthreads(); \\\n"
    "    for (int h = blockDim.x / 2; h > 0; h >>= 1) { \\\n"
    "        if (t < h) \\\n"
    "            s[t] += s[t + h]; \\\n"
    "        LOOP_SYNC; \\\n"
    "    } \\\n"
    "    if (t == 0) \\\n"
    "        out[blockIdx.x] = s[0]; \\\n"
    "}\n"
    "BLOCK_SUM(block_sum, __syncthreads())\n"
    "BLOCK_SUM(block_sum_racy, (void)0)\n"
    "\n"
    "extern \"C\" __global__ void warps(const int *x, int *out, float *fout, double *dout)\n"
    "{\n"
    "    unsigned t = threadIdx.x, lane = t & 31, mask = __activemask();\n"
    "    int v = x[t], w = mask == 0xffffffffu ? 32 : 16, s = v;\n"
    "    float f = v * 0.5f;\n"
    "    for (int o = w / 2; o > 0; o >>= 1) {\n"
    "        s += __shfl_xor_sync(mask, s, o, w);\n"
    "        f += __shfl_xor_sync(mask, f, o, w);\n"
    "    }\n"
    "    int *r = out + t * 9;\n"
    "    r[0] = s;\n"
    "    r[1] = __shfl_up_sync(mask, v, 1);\n"
    "    r[2] = __shfl_down_sync(mask, v, 3, 16);\n"
    "    r[3] = __shfl_sync(mask, v, 5);\n"
    "    r[4] = (int)__ballot_sync(mask, v & 1);\n"
    "    r[5] = __any_sync(mask, v == 7);\n"
    "    r[6] = __all_sync(mask, v >= 0);\n"
    "    r[7] = __shfl_down_sync(mask, v, 8);\n"
    "    r[8] = __reduce_add_sync(mask, v);\n"
    "    fout[t] = f;\n"
    "    dout[t] = __shfl_sync(mask, v / 4.0, (int)(lane ^ 1));\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void read_early(float *out, float *dyn_out)\n"
    "{\n"
    "    __shared__ float s[64];\n"
    "    CT_DYN_SHARED(float, d);\n"
    "    unsigned t = threadIdx.x, o = blockIdx.x * blockDim.x + t;\n"
    "    out[o] = s[t];\n"
    "    dyn_out[o] = d[t];\n"
    "    s[t] = 1.0f;\n"
    "    d[t] = 2.0f;\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void atomics(int *count, float *fsum, unsigned *umax, double *dsum,\n"
    "                                    unsigned long long *cas_sum, int *odd)\n"
    "{\n"
    "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    atomicAdd(count, 1);\n"
    "    int c = __syncthreads_count(i & 1);\n"
    "    if (threadIdx.x == 0)\n"
    "        atomicAdd(odd, c);\n"
    "    atomicAdd(fsum, 0.5f);\n"
    "    atomicMax(umax, i);\n"
    "    __syncthreads();\n"
    "    atomicAdd(dsum, (double)i);\n"
    "    unsigned long long old = *cas_sum, seen;\n"
    "    do {\n"
    "        seen = old;\n"
    "        old = atomicCAS(cas_sum, seen, seen + i);\n"
    "    } while (old != seen);\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void early_exit(float *out)\n"
    "{\n"
    "    if (threadIdx.x == 3)\n"
    "        return;\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void split_wait(float *out)\n"
    "{\n"
    "    if ((threadIdx.x & 31) == 0)\n"
    "        __syncthreads();\n"
    "    else\n"
    "        __syncwarp();\n"
    "    out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void bad_mask(float *out)\n"
    "{\n"
    "    out[threadIdx.x] = __shfl_sync(0x2u, 1.0f, 0);\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void traps(float *out)\n"
    "{\n"
    "    if (threadIdx.x == 5)\n"
    "        __trap();\n"
    "    out[threadIdx.x] = 1.0f;\n"
    "}\n";

/* Barrier-free kernels: a module whose threads run straight through. */
static const char straight_kernels[] =
    "extern \"C\" __global__ void axpy(const float *x, float *y, float a, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        y[i] += a * x[i];\n"
    "}\n"
    "\n"
    "static_assert(alignof(float4) == 16 && alignof(int2) == 8 && alignof(uchar4) == 4 && alignof(double2) == 16 &&\n"
    "              sizeof(half2) == 4 && alignof(__nv_bfloat162) == 4 && sizeof(short3) == 6,\n"
    "              \"CUDA's vector types\");\n"
    "\n"
    "extern \"C\" __global__ void convert(const float *x, unsigned short *h, unsigned short *b, float *hf, float *bf,\n"
    "                                    int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n)\n"
    "        return;\n"
    "    __half hv = __float2half(x[i]);\n"
    "    __nv_bfloat16 bv = __float2bfloat16(x[i]);\n"
    "    h[i] = __half_as_ushort(hv);\n"
    "    b[i] = __bfloat16_as_ushort(bv);\n"
    "    hf[i] = __half2float(hv);\n"
    "    bf[i] = __bfloat162float(bv);\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void store_to(float *y, int last)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i <= last)\n"
    "        y[i] = 1.0f;\n"
    "}\n";

static SimLaunch grid1(unsigned blocks, unsigned threads, uint64_t seed)
{
    return (SimLaunch){.grid = {blocks, 1, 1}, .block = {threads, 1, 1}, .seed = seed};
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 8 blocks of 256 over 2000 integers: each block's sum, by seed. */
static int block_sums(SimModule *m, const char *kernel, uint64_t seed, float *out)
{
    enum { N = 2000 };
    static float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 7 + 1);
    int n = N;
    SimLaunch l = grid1(8, 256, seed);
    CtErr err;
    int rc = sim_launch(m, kernel, &l, (void *[]){&(const float *){x}, &out, &n}, &err);
    CHECKF(rc == 0, "%s: %s", kernel, err.msg);
    return rc;
}

static void test_barriers(SimModule *m)
{
    float want[8] = {0}, got[8], racy[4][8], again[8];
    for (int i = 0; i < 2000; i++)
        want[i / 256] += (float)(i % 7 + 1);
    for (uint64_t seed = 1; seed <= 3; seed++)
        if (!block_sums(m, "block_sum", seed, got))
            CHECKF(!memcmp(got, want, sizeof want), "seed %llu: block 0 sums to %g, want %g", (unsigned long long)seed,
                   got[0], want[0]);
    int differ = 0, wrong = 0;
    for (int s = 0; s < 4; s++) {
        if (block_sums(m, "block_sum_racy", (uint64_t)s + 1, racy[s]))
            return;
        differ += s > 0 && memcmp(racy[s], racy[0], sizeof want) != 0;
        wrong += memcmp(racy[s], want, sizeof want) != 0;
    }
    CHECKF(differ > 0, "the reduction without its loop barrier gives the same sums under 4 seeds");
    CHECKF(wrong > 0, "the reduction without its loop barrier is right under 4 seeds");
    if (!block_sums(m, "block_sum_racy", 1, again))
        CHECKF(!memcmp(again, racy[0], sizeof again), "one seed, two runs, two results");
    printf("test_simt: missing barrier: %d of 4 seeds wrong, %d differ from the first\n", wrong, differ);
}

static void test_poison(SimModule *m)
{
    float out[128], dyn[128];
    SimLaunch l = grid1(2, 64, 7);
    l.dyn_shared = 64 * sizeof(float);
    CtErr err;
    int rc = sim_launch(m, "read_early", &l, (void *[]){&(float *){out}, &(float *){dyn}}, &err);
    CHECKF(rc == 0, "%s", err.msg);
    int poisoned = 0;
    for (int i = 0; rc == 0 && i < 128; i++) {
        uint32_t a, b;
        memcpy(&a, &out[i], 4);
        memcpy(&b, &dyn[i], 4);
        poisoned += isnan(out[i]) && isnan(dyn[i]) && a == 0xffffffffu && b == 0xffffffffu;
    }
    CHECKF(rc || poisoned == 128, "%d of 128 reads before writes saw the poison (0xFF bytes, NaN)", poisoned);
}

/* 48 threads: a full warp and one of 16 lanes. */
static void test_warps(SimModule *m)
{
    enum { T = 48 };
    int x[T], out[T * 9];
    float fout[T];
    double dout[T];
    for (int t = 0; t < T; t++)
        x[t] = (t * 7 + 3) % 11;
    SimLaunch l = grid1(1, T, 3);
    CtErr err;
    if (sim_launch(m, "warps", &l, (void *[]){&(int *){x}, &(int *){out}, &(float *){fout}, &(double *){dout}},
                   &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    for (int t = 0; t < T; t++) {
        int base = t & ~31, lane = t & 31, lanes = T - base < 32 ? T - base : 32, sum = 0;
        unsigned ballot = 0;
        int any7 = 0;
        float fsum = 0;
        for (int j = 0; j < lanes; j++) {
            sum += x[base + j];
            fsum += x[base + j] * 0.5f;
            ballot |= (unsigned)(x[base + j] & 1) << j;
            any7 |= x[base + j] == 7;
        }
        int down3 = lane + 3 <= (lane & ~15) + 15 ? x[t + 3] : x[t];
        int down8 = lane + 8 > 31 ? x[t] : lane + 8 < lanes ? x[t + 8] : -1; /* a lane that is not there: poison */
        int want[9] = {sum, lane ? x[t - 1] : x[t], down3, x[base + 5], (int)ballot, any7, 1, down8, sum};
        for (int k = 0; k < 9; k++)
            CHECKF(out[t * 9 + k] == want[k], "thread %d, result %d: %d, want %d", t, k, out[t * 9 + k], want[k]);
        CHECKF(fout[t] == fsum, "thread %d: float butterfly %g, want %g", t, fout[t], fsum);
        CHECKF(dout[t] == x[base + (lane ^ 1)] / 4.0, "thread %d: double shuffle %g", t, dout[t]);
    }
}

static void test_atomics(SimModule *m)
{
    int count = 0;
    float fsum = 0;
    unsigned umax = 0;
    double dsum = 0;
    unsigned long long cas_sum = 0;
    int odd = 0;
    SimLaunch l = grid1(8, 256, 11);
    CtErr err;
    if (sim_launch(m, "atomics", &l,
                   (void *[]){&(int *){&count}, &(float *){&fsum}, &(unsigned *){&umax}, &(double *){&dsum},
                              &(unsigned long long *){&cas_sum}, &(int *){&odd}},
                   &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    CHECK(count == 2048);
    CHECK(fsum == 1024.0f);
    CHECK(umax == 2047);
    CHECK(dsum == 2047.0 * 2048 / 2);
    CHECK(cas_sum == 2047ull * 2048 / 2);
    CHECKF(odd == 1024, "__syncthreads_count: %d odd threads, want 1024", odd);
}

/* __float2half and __float2bfloat16 round to nearest even as the host
 * conversions do: ties, subnormals, overflow, infinities; NaN stays NaN. */
static void test_conversions(SimModule *m)
{
    enum { N = 4096 };
    static float x[N], hf[N], bf[N], want_hf[N], want_bf[N];
    static unsigned short h[N], b[N], want_h[N], want_b[N];
    static const float special[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, -65536.0f, 1e-8f, 2.98e-8f,
                                    5.96e-8f, 6.1e-5f, 1.00048828125f, 1.00146484375f, 1.00390625f, 1.01171875f,
                                    3.0e38f, INFINITY, -INFINITY, NAN};
    uint32_t r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = i < (int)(sizeof special / sizeof *special) ? special[i]
                                                            : ldexpf((float)(r >> 8) / 16777216.0f - 0.5f, i % 60 - 30);
    }
    elems_from_f32(x, CT_F16, N, want_h);
    elems_from_f32(x, CT_BF16, N, want_b);
    elems_to_f32(want_h, CT_F16, N, want_hf);
    elems_to_f32(want_b, CT_BF16, N, want_bf);
    int n = N;
    SimLaunch l = grid1(16, 256, 2);
    CtErr err;
    if (sim_launch(m, "convert", &l,
                   (void *[]){&(const float *){x}, &(unsigned short *){h}, &(unsigned short *){b}, &(float *){hf},
                              &(float *){bf}, &n},
                   &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int ok = isnan(x[i]) ? isnan(hf[i]) && isnan(bf[i])
                             : h[i] == want_h[i] && b[i] == want_b[i] && !memcmp(&hf[i], &want_hf[i], 4) &&
                                   !memcmp(&bf[i], &want_bf[i], 4);
        if (!ok && bad++ < 5)
            CHECKF(0, "%.9g: half 0x%04x (want 0x%04x), bfloat16 0x%04x (want 0x%04x)", x[i], h[i], want_h[i], b[i],
                   want_b[i]);
    }
}

/* Each fails with err naming the kernel and saying what; then the module
 * still runs a kernel with barriers right. */
static void test_failures(SimModule *m)
{
    static const struct {
        const char *kernel, *says;
    } cases[] = {
        {"early_exit", "exited while 63 threads wait at __syncthreads"},
        {"split_wait", "neither can go on"},
        {"bad_mask", "which its mask 0x00000002 leaves out"},
        {"traps", "thread (5,0,0): __trap()"},
    };
    float out[64];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        CtErr err = {{0}};
        SimLaunch l = grid1(2, 64, 5);
        int rc = sim_launch(m, cases[c].kernel, &l, (void *[]){&(float *){out}}, &err);
        CHECKF(rc == -1 && strstr(err.msg, cases[c].kernel) && strstr(err.msg, cases[c].says),
               "%s: rc %d, \"%s\"", cases[c].kernel, rc, err.msg);
    }
    CtErr err;
    SimLaunch l = grid1(1, 2000, 1);
    CHECK(sim_launch(m, "block_sum", &l, (void *[]){NULL, NULL, NULL}, &err) == -1 && strstr(err.msg, "1024"));
    CHECK(sim_launch(m, "no_such_kernel", &l, NULL, &err) == -1 && strstr(err.msg, "no_such_kernel"));
    float want[8] = {0}, got[8];
    for (int i = 0; i < 2000; i++)
        want[i / 256] += (float)(i % 7 + 1);
    if (!block_sums(m, "block_sum", 9, got))
        CHECKF(!memcmp(got, want, sizeof want), "after the failures: block 0 sums to %g, want %g", got[0], want[0]);
}

/* 64 blocks of 256 threads, with barriers (fibers) and without. */
static void test_speed(SimModule *fibers, SimModule *straight)
{
    enum { N = 64 * 256 };
    static float x[N], y[N], sums[64];
    int n = N;
    float a = 2;
    CtErr err;
    SimLaunch l = grid1(64, 256, 1);
    double t0 = now();
    int rc = sim_launch(fibers, "block_sum", &l, (void *[]){&(const float *){x}, &(float *){sums}, &n}, &err);
    double t1 = now();
    rc = rc || sim_launch(straight, "axpy", &l, (void *[]){&(const float *){x}, &(float *){y}, &a, &n}, &err);
    double t2 = now();
    CHECKF(rc == 0, "%s", err.msg);
    printf("test_simt: 64 blocks x 256 threads: %.1f ms with 9 barriers a thread (fibers), %.2f ms straight\n",
           (t1 - t0) * 1e3, (t2 - t1) * 1e3);
}

/* A store one element past a guarded buffer: ASan's report, in a child. */
static void test_bounds(SimModule *m)
{
    enum { N = 64 };
    float *arena = aligned_alloc(64, 2 * N * sizeof(float));
    CT_ASSERT(arena != NULL);
    int last = N - 1;
    CtErr err;
    SimLaunch l = grid1(2, 64, 1);
    sim_guard(arena, 2 * N * sizeof(float));
    sim_allow(arena, N * sizeof(float));
    CHECKF(sim_launch(m, "store_to", &l, (void *[]){&arena, &last}, &err) == 0, "in bounds: %s", err.msg);
    if (!sim_checks_bounds()) {
        printf("test_simt: not an AddressSanitizer build: the out-of-bounds store is not checked\n");
    } else {
        int fds[2];
        CT_ASSERT(pipe(fds) == 0);
        fflush(NULL);
        pid_t pid = fork();
        CT_ASSERT(pid >= 0);
        if (pid == 0) {
            dup2(fds[1], 2);
            last = N;
            _exit(sim_launch(m, "store_to", &l, (void *[]){&arena, &last}, &err) == 0 ? 0 : 3);
        }
        close(fds[1]);
        char report[8192];
        size_t n = 0;
        ssize_t r;
        while (n < sizeof report - 1 && (r = read(fds[0], report + n, sizeof report - 1 - n)) > 0)
            n += (size_t)r;
        report[n] = 0;
        close(fds[0]);
        int st;
        waitpid(pid, &st, 0);
        CHECKF(!(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3)),
               "the store past the buffer went unnoticed");
        CHECKF(strstr(report, "AddressSanitizer") && strstr(report, "store_to"),
               "no ASan report naming the kernel: %.300s", report);
    }
    sim_allow(arena, 2 * N * sizeof(float));
    free(arena);
}

/* The kernels' names in a CUDA C text: every `extern "C" __global__ void NAME(`. */
static int kernel_names(const char *text, char names[][48], int cap)
{
    static const char head[] = "extern \"C\" __global__ void ";
    int n = 0;
    for (const char *p = strstr(text, head); p && n < cap; p = strstr(p + 1, head)) {
        const char *s = p + sizeof head - 1;
        size_t len = strcspn(s, "(");
        snprintf(names[n++], 48, "%.*s", (int)(len < 47 ? len : 47), s);
    }
    return n;
}

static SimModule *build_of(const char *what, const char *text, const char *const *names, int n)
{
    SimModule *m = NULL;
    CtErr err;
    double t0 = now();
    if (sim_module_build(text, names, n, &m, &err))
        CHECKF(0, "%s: %s", what, err.msg);
    else
        printf("test_simt: %s: %d kernels built in %.1f s\n", what, n, now() - t0);
    return m;
}

static SimModule *build(const char *what, const char *text, char names[][48], int n)
{
    const char *ptrs[256];
    CT_ASSERT(n <= 256);
    for (int i = 0; i < n; i++)
        ptrs[i] = names[i];
    return build_of(what, text, ptrs, n);
}

/* A test model's generated kernels, bf16 AMP in channels_last, as
 * ctimm-compile --dump-kernels cuda prints them: they compile. */
static void test_model_kernels(void)
{
    Graph g;
    if (model_graph("test_resnet", &(GraphSpec){.training = 1, .amp = CT_BF16, .channels_last = 1}, &g))
        return;
    FusePlan p;
    CtBuf text = {0};
    CtErr err;
    int nk;
    static char names[256][48];
    if (fuse_plan(&g, &p, &err) || render_graph(&g, &p, 1, &text, &nk, &err)) {
        CHECKF(0, "%s", err.msg);
    } else {
        int n = kernel_names(text.s, names, 256);
        CHECKF(n == nk && n > 0, "%d kernels named, %d rendered", n, nk);
        sim_module_free(build("test_resnet's generated kernels", text.s, names, n));
        fuse_free(&p);
    }
    buf_free(&text);
    graph_free(&g);
}

static double gen(int64_t i, int k) { return sin(0.7 * (double)i + 1.3 * k + 0.1) * 0.9; }

/* ||a - b|| / ||b|| over n floats. */
static double rel(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d / (s > 0 ? s : 1));
}

/* g's inputs filled by gen, ref's outputs in out; mem[v] per value, the inputs in
 * their physical layout (value_strides). */
static int run_ref(const Graph *g, CtTensor *out, void **mem)
{
    CtTensor in[8];
    int nin = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        int64_t n = shape_numel(&val->type.shape), st[CT_MAX_DIMS];
        mem[v] = calloc((size_t)n + 1, sizeof(float));
        CT_ASSERT(mem[v] != NULL);
        if (val->role != CT_ROLE_INPUT)
            continue;
        tensor_alloc(&in[nin], val->type);
        value_strides(val, st);
        for (int64_t i = 0; i < n; i++) {
            int64_t off = 0, r = i;
            for (int d = val->type.shape.ndim - 1; d >= 0; d--) {
                off += r % val->type.shape.d[d] * st[d];
                r /= val->type.shape.d[d];
            }
            ((float *)in[nin].data)[i] = ((float *)mem[v])[off] = (float)gen(i, nin);
        }
        nin++;
    }
    CtState st;
    CtErr err;
    state_create(&st, g);
    int rc = backend_run_once(&ct_backend_ref, g, &st, in, nin, out, NULL, &err);
    CHECKF(rc == 0, "ref: %s", err.msg);
    state_free(&st);
    for (int k = 0; k < nin; k++)
        tensor_free(&in[k]);
    return rc;
}

/* A graph output's memory in row-major order (from its physical layout). */
static void logical(const Value *val, const float *mem, float *out)
{
    int64_t n = shape_numel(&val->type.shape), st[CT_MAX_DIMS];
    value_strides(val, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = val->type.shape.ndim - 1; d >= 0; d--) {
            off += r % val->type.shape.d[d] * st[d];
            r /= val->type.shape.d[d];
        }
        out[i] = mem[off];
    }
}

static void compare_outputs(const char *what, const Graph *g, CtTensor *ref, void **mem, double tol)
{
    for (int k = 0; k < g->noutputs; k++) {
        const Value *val = &g->values[g->outputs[k]];
        int64_t n = shape_numel(&val->type.shape);
        float *got = malloc(sizeof *got * (size_t)n);
        CT_ASSERT(got != NULL);
        logical(val, mem[g->outputs[k]], got);
        double e = rel(got, ref[k].data, n);
        CHECKF(e <= tol, "%s, output %d: relative error %.3g", what, k, e);
        free(got);
    }
}

static void free_refs(const Graph *g, CtTensor *ref)
{
    for (int k = 0; k < g->noutputs; k++)
        tensor_free(&ref[k]);
}

/* Node op on a (and b unless -1), its iattr[0] i and fattr f0, f1: its output. */
static ValueId add(Graph *g, CtOp op, ValueId a, ValueId b, int64_t i, double f0, double f1)
{
    Node n = {.op = op, .nin = b < 0 ? 1 : 2, .in = {a, b}, .iattr = {i}, .fattr = {f0, f1}};
    CtErr err;
    if (a < 0)
        return -1;
    int id = graph_add_node(g, &n, "t", &err);
    CHECKF(id >= 0, "%s: %s", op_def(op)->name, err.msg);
    return id < 0 ? -1 : g->nodes[id].out[0];
}

/* A graph's generated kernels (at most 8), lowered and rendered as the
 * cuda target does, after the prelude in text. */
typedef struct Generated {
    FusePlan p;
    KirKernel ks[8];
    char names[8][48];
    int nk;
    CtBuf text;
} Generated;

static int generated_open(Graph *g, Generated *gen)
{
    CtErr err;
    memset(gen, 0, sizeof *gen);
    if (fuse_plan(g, &gen->p, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    render_cuda_prelude(&gen->text);
    for (int l = 0; l < gen->p.kernels_after && gen->nk < 8; l++) {
        if (!kir_lowerable(&gen->p, l))
            continue;
        if (kir_lower(g, &gen->p, l, (KirOptions){KIR_F32, 1}, &gen->ks[gen->nk], &err)) {
            CHECKF(0, "%s", err.msg);
            break;
        }
        render_cuda_kernel(&gen->ks[gen->nk], &gen->text);
        snprintf(gen->names[gen->nk], 48, "ct_k%d", l);
        gen->nk++;
    }
    return 0;
}

/* Each kernel on 3 blocks of 64, its buffers at mem[value]. */
static void generated_launch(SimModule *m, Generated *gen, void **mem)
{
    CtErr err;
    for (int k = 0; k < gen->nk; k++) {
        void *ptr[16], *params[16];
        CT_ASSERT(gen->ks[k].nbufs <= 16);
        for (int b = 0; b < gen->ks[k].nbufs; b++) {
            ptr[b] = mem[gen->ks[k].bufs[b].value];
            params[b] = &ptr[b];
        }
        SimLaunch l = grid1(3, 64, (uint64_t)k + 1);
        CHECKF(sim_launch(m, gen->names[k], &l, params, &err) == 0, "%s", err.msg);
    }
}

static void generated_free(Generated *gen)
{
    for (int k = 0; k < gen->nk; k++)
        kir_free(&gen->ks[k]);
    buf_free(&gen->text);
    fuse_free(&gen->p);
}

/* Elementwise work with broadcasts and f16/bf16 casts, lowered and
 * rendered as the cuda target does, launched on 3 blocks of 64. */
static void test_generated(void)
{
    Graph g;
    graph_init(&g);
    ValueId x = graph_add_value(&g, (CtType){shape_make(4, (int64_t[]){2, 3, 4, 5}), CT_F32}, CT_ROLE_INPUT, "x");
    ValueId y = graph_add_value(&g, (CtType){shape_make(3, (int64_t[]){3, 1, 5}), CT_F32}, CT_ROLE_INPUT, "y");
    ValueId xy = add(&g, CT_OP_mul, x, y, 0, 0, 0);
    ValueId a = add(&g, CT_OP_add, add(&g, CT_OP_gelu, xy, -1, 0, 0, 0), x, 0, 0, 0);
    ValueId h = add(&g, CT_OP_scale_shift, add(&g, CT_OP_cast, x, -1, CT_F16, 0, 0), -1, 0, 3, 0.25);
    ValueId b = add(&g, CT_OP_cast, add(&g, CT_OP_cast, x, -1, CT_BF16, 0, 0), -1, CT_F32, 0, 0);
    if (a < 0 || h < 0 || b < 0)
        goto free_graph;
    graph_mark_output(&g, a);
    graph_mark_output(&g, add(&g, CT_OP_cast, h, -1, CT_F32, 0, 0));
    graph_mark_output(&g, b);
    static Generated gen;
    if (generated_open(&g, &gen))
        goto free_graph;
    SimModule *m = build("a small graph's generated kernels", gen.text.s, gen.names, gen.nk);
    CtTensor ref[3];
    void **mem = calloc((size_t)g.nvalues, sizeof *mem);
    if (m && run_ref(&g, ref, mem) == 0) {
        generated_launch(m, &gen, mem);
        compare_outputs("generated kernels", &g, ref, mem, 1e-6);
        free_refs(&g, ref);
    }
    sim_module_free(m);
    for (ValueId v = 0; v < g.nvalues; v++)
        free(mem[v]);
    free(mem);
    generated_free(&gen);
free_graph:
    graph_free(&g);
}

/* Long loops' main parts in 16-byte chunks (codegen/render_cuda.c): an
 * NCHW operand read into a channels-last output (four loads a chunk, a
 * channel stride apart), channels-last and bias operands read in vectors,
 * a bias broadcast along the chunk (one load), a row whose length is no
 * whole number of chunks (each element's offset), a tail past the chunks;
 * run twice, the second time with every buffer 4 bytes off 16-byte
 * alignment, which takes the groups of CT_ELEMENTS instead. */
static void test_vector_parts(void)
{
    Graph g;
    graph_init(&g);
    CtShape img = shape_make(4, (int64_t[]){2, 64, 96, 96});
    ValueId x = graph_add_value(&g, (CtType){img, CT_F32}, CT_ROLE_INPUT, "x");
    ValueId y = graph_add_value(&g, (CtType){img, CT_F32}, CT_ROLE_INPUT, "y");
    ValueId bias = graph_add_value(&g, (CtType){shape_make(3, (int64_t[]){64, 1, 1}), CT_F32}, CT_ROLE_INPUT, "bias");
    ValueId z = graph_add_value(&g, (CtType){shape_make(2, (int64_t[]){1027, 1023}), CT_F32}, CT_ROLE_INPUT, "z");
    ValueId row = graph_add_value(&g, (CtType){shape_make(1, (int64_t[]){1023}), CT_F32}, CT_ROLE_INPUT, "row");
    g.values[y].layout = CT_LAYOUT_CHANNELS_LAST;
    ValueId a = add(&g, CT_OP_add, x, y, 0, 0, 0);
    if (a >= 0)
        g.values[a].layout = CT_LAYOUT_CHANNELS_LAST;
    ValueId out1 = add(&g, CT_OP_mul, a, bias, 0, 0, 0);
    ValueId out2 = add(&g, CT_OP_scale_shift, add(&g, CT_OP_mul, x, bias, 0, 0, 0), -1, 0, 2, 1);
    ValueId out3 = add(&g, CT_OP_add, z, row, 0, 0, 0);
    if (out1 < 0 || out2 < 0 || out3 < 0)
        goto free_graph;
    g.values[out1].layout = CT_LAYOUT_CHANNELS_LAST;
    graph_mark_output(&g, out1);
    graph_mark_output(&g, out2);
    graph_mark_output(&g, out3);
    static Generated gen;
    if (generated_open(&g, &gen))
        goto free_graph;
    /* each way of reading a chunk is there: in vectors, a channel stride
     * apart, once, and element by element */
    const char *t = gen.text.s;
    CHECKF(strstr(t, "const ct_u4 w") && strstr(t, "CT_VEC(ct_u4, b") && strstr(t, " + 9216LL]") &&
               strstr(t, "_1 = v") && strstr(t, "_1]);"),
           "the vector parts lack a kind of read:\n%s", t);
    SimModule *m = build("long loops' vector parts", t, gen.names, gen.nk);
    CtTensor ref[3];
    void **mem = calloc((size_t)g.nvalues, sizeof *mem), **off = calloc((size_t)g.nvalues, sizeof *off);
    if (m && run_ref(&g, ref, mem) == 0) {
        for (int shifted = 0; shifted < 2; shifted++) {
            void **at = shifted ? off : mem;
            for (ValueId v = 0; shifted && v < g.nvalues; v++) {
                size_t n = (size_t)shape_numel(&g.values[v].type.shape);
                float *f = calloc(n + 2, sizeof *f);
                CT_ASSERT(f != NULL);
                memcpy(f + 1, mem[v], n * sizeof *f);
                off[v] = f + 1;
            }
            generated_launch(m, &gen, at);
            compare_outputs(shifted ? "vector parts, misaligned" : "vector parts", &g, ref, at, 1e-6);
        }
        free_refs(&g, ref);
    }
    sim_module_free(m);
    for (ValueId v = 0; v < g.nvalues; v++) {
        free(mem[v]);
        free(off[v] ? (float *)off[v] - 1 : NULL);
    }
    free(mem);
    free(off);
    generated_free(&gen);
free_graph:
    graph_free(&g);
}

/* One node's library launches, their arguments stored as the executor
 * stores them, over 3 blocks of 64 threads; its outputs against ref's. */
/* Runs node's launches on the cuda-sim against ref; the work items of its
 * first launch, or -1. */
static long long check_lib_node(SimModule *m, Graph *g, int node, const char *what, char first[48])
{
    long long items = -1;
    CtTensor ref[CT_MAX_OUT];
    void **mem = calloc((size_t)g->nvalues, sizeof *mem);
    LibLaunch l[LIB_MAX_LAUNCHES];
    int nl;
    size_t scratch_bytes;
    CtErr err;
    if (run_ref(g, ref, mem) == 0 && lib_launches(g, 132, &g->nodes[node], l, &nl, &scratch_bytes, &err) == 0) {
        void *scratch = calloc(scratch_bytes + 8, 1);
        unsigned counters[4096] = {0}, used = 0;
        for (int j = 0; j < nl; j++) {
            union {
                void *p;
                long long i;
                int i32;
                float f;
                double d;
                CtIndex ix;
                CtPool pool;
            } store[LIB_MAX_ARGS];
            void *params[LIB_MAX_ARGS];
            for (int a = 0; a < l[j].nargs; a++) {
                const LibArg *arg = &l[j].arg[a];
                switch (arg->kind) {
                case LA_VALUE: store[a].p = mem[arg->v]; break;
                case LA_SCRATCH: store[a].p = (char *)scratch + arg->i; break;
                case LA_NULL: store[a].p = NULL; break;
                case LA_COUNTERS:
                    CT_ASSERT(arg->i <= 4096);
                    store[a].p = counters;
                    used = (unsigned)arg->i > used ? (unsigned)arg->i : used;
                    break;
                case LA_KEPT: /* a node's own launches keep nothing from step to step */
                    CHECKF(0, "%s: launch %d keeps a value", what, j);
                    store[a].p = NULL;
                    break;
                case LA_I64: store[a].i = arg->i; break;
                case LA_I32: store[a].i32 = (int)arg->i; break;
                case LA_F32: store[a].f = arg->f; break;
                case LA_F64: store[a].d = arg->d; break;
                case LA_INDEX: store[a].ix = arg->ix; break;
                case LA_POOL: store[a].pool = arg->pool; break;
                }
                params[a] = &store[a];
            }
            SimLaunch sl = grid1(3, 64, (uint64_t)j + 1);
            sl.dyn_shared = l[j].shared;
            CHECKF(sim_launch(m, l[j].kernel, &sl, params, &err) == 0, "%s: %s", what, err.msg);
        }
        compare_outputs(what, g, ref, mem, 1e-5);
        unsigned left = 0;
        for (unsigned k = 0; k < used; k++)
            left |= counters[k];
        CHECKF(left == 0, "%s: the launches left their counters nonzero", what);
        free_refs(g, ref);
        free(scratch);
        items = l[0].items;
        if (first)
            snprintf(first, 48, "%s", l[0].kernel);
    } else {
        CHECKF(0, "%s: %s", what, err.msg);
    }
    for (ValueId v = 0; v < g->nvalues; v++)
        free(mem[v]);
    free(mem);
    return items;
}

/* A graph of one node on an NHWC input x [2,3,4,5]. */
static int one_node(Graph *g, CtOp op, const int64_t *a, int na, const double *f, int nf, int nhwc)
{
    graph_init(g);
    ValueId x = graph_add_value(g, (CtType){shape_make(4, (int64_t[]){2, 3, 4, 5}), CT_F32}, CT_ROLE_INPUT, "x");
    g->values[x].layout = nhwc ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
    Node n = {.op = op, .nin = 1, .in = {x}};
    memcpy(n.iattr, a, sizeof *a * (size_t)na);
    if (nf)
        memcpy(n.fattr, f, sizeof *f * (size_t)nf);
    CtErr err;
    int id = graph_add_node(g, &n, "t", &err);
    CHECKF(id >= 0, "%s", err.msg);
    if (id < 0)
        return -1;
    for (int k = 0; k < g->nodes[id].nout; k++) {
        Value *v = &g->values[g->nodes[id].out[k]];
        v->layout = nhwc && v->type.shape.ndim == 4 ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
        graph_mark_output(g, g->nodes[id].out[k]);
    }
    return id;
}

/* A graph of node `op` (iattr[0] i, fattr[0] f) on f32 inputs of shapes
 * s[0..nin), its outputs the graph's. */
static int node_on(Graph *g, CtOp op, int nin, const CtShape *s, int64_t i, double f)
{
    graph_init(g);
    Node n = {.op = op, .nin = nin, .iattr = {i}, .fattr = {f}};
    for (int k = 0; k < nin; k++)
        n.in[k] = graph_add_value(g, (CtType){s[k], CT_F32}, CT_ROLE_INPUT, NULL);
    CtErr err;
    int id = graph_add_node(g, &n, "t", &err);
    CHECKF(id >= 0, "%s", err.msg);
    for (int k = 0; id >= 0 && k < g->nodes[id].nout; k++)
        graph_mark_output(g, g->nodes[id].out[k]);
    return id;
}

/* made at build time from codegen/cuda/lib_kernels.h */
extern const char ct_lib_kernels_text[];

static void test_library(void)
{
    /* CT_GLOBAL [CT_BOUNDS(b)] CT_SFX(name)(...): name_f32, name_f16, name_bf16, a unit each;
     * CT_GLOBAL16: the last two. Each name's unit is the one lib_kernel_type gives. The f32 unit's
     * module is built (its build binds each name: a name of no kernel fails it); the cases below
     * are f32's. */
    int globals = 0, globals16 = 0, bounded = 0;
    for (const char *p = strstr(ct_lib_kernels_text, "CT_GLOBAL"); p; p = strstr(p + 1, "CT_GLOBAL")) {
        globals += !strncmp(p, "CT_GLOBAL CT_SFX(", 17) || !strncmp(p, "CT_GLOBAL CT_BOUNDS(", 20);
        globals16 += !strncmp(p, "CT_GLOBAL16 CT_SFX(", 19);
        bounded += !strncmp(p, "CT_GLOBAL CT_BOUNDS(", 20);
    }
    CHECKF(bounded > 0, "%d library kernels bounded (CT_BOUNDS)", bounded);
    static const char *const suffix[LIB_NTYPES] = {"_f32", "_f16", "_bf16"};
    for (int t = 0; t < LIB_NTYPES; t++) {
        int n, want = globals + (t == LIB_F32 ? 0 : globals16), named = 0;
        const char *const *names = lib_kernel_names((LibType)t, &n);
        for (int k = 0; k < n; k++) {
            size_t len = strlen(names[k]), sl = strlen(suffix[t]);
            named += lib_kernel_type(names[k]) == t && len > sl && !strcmp(names[k] + len - sl, suffix[t]);
        }
        CHECKF(n > 20 && n == want && named == n, "unit %s: %d library kernels named (%d of them its own), %d defined",
               suffix[t], n, named, want);
        CHECKF(lib_kernel_names((LibType)t, &n) == names, "lib_kernel_names: a table of its own on a second call");
    }
    CHECK(lib_kernel_type("ct_k3") == -1 && lib_kernel_type("ct_copy_f64") == -1 &&
          lib_kernel_type("ct_attn_tc_f32") == -1 && lib_kernel_type("ct_attn_tc_bf16") == LIB_BF16);
    CtBuf text = {0};
    lib_source(LIB_F32, &text);
    int nlib;
    const char *const *lib = lib_kernel_names(LIB_F32, &nlib);
    SimModule *m = build_of("the f32 library kernels", text.s, lib, nlib);
    buf_free(&text);
    if (!m)
        return;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        Graph g;
        int id;
        if ((id = one_node(&g, CT_OP_permute, (int64_t[]){4, 0, 2, 3, 1}, 5, NULL, 0, nhwc)) >= 0)
            check_lib_node(m, &g, id, "permute (ct_copy)", NULL);
        graph_free(&g);
        if ((id = one_node(&g, CT_OP_softmax, (int64_t[]){1}, 1, NULL, 0, nhwc)) >= 0)
            check_lib_node(m, &g, id, "softmax over C", NULL);
        graph_free(&g);
        if ((id = one_node(&g, CT_OP_reduce_sum, (int64_t[]){0xd, 0}, 2, NULL, 0, nhwc)) >= 0)
            check_lib_node(m, &g, id, "reduce_sum over N, H, W", NULL);
        graph_free(&g);
    }
    /* attention of q [1, 2, 40, 8] over 37 keys with a bias [1, 2, 40, 37]
     * (the gradient's dbias too): two query tiles of the tiled kernels, two
     * and three key tiles, the last ones partial; at head dim 80 (16-row
     * tiles) without a bias; layer_norm of 37 rows of 40 (10 groups of 4:
     * 16 lanes a row, 8 rows a warp, the last warp's partial), of 37 rows
     * of 160 (40 groups: two a lane, the second's past the row in 24
     * lanes, 4 rows a warp), of 70 rows of 8 (2 lanes a row, 64 rows a
     * warp) and of 37 rows of 640 (160 groups: five a lane, a row a warp:
     * dx's kernel of a row a lane); column sums, in tiles whose last of
     * each column adds the column's slices: layer norm's weights over 1600
     * rows (2 columns of 8 work items of 4 columns, 50 slices), reduce_sum
     * over 1600 rows (3 outputs, one column, 50 slices), batch norm's
     * statistics (NCHW: a channel a column, 7 slices; NHWC: 8 work items of
     * 4 channels a column, 13 slices; the 64 threads a block here 8 lanes a
     * work item); a concat whose copies take 16 bytes a work item
     * (ct_copy_vec) */
    const CtShape q = {4, {1, 2, 40, 8}}, kv = {4, {1, 2, 37, 8}}, bias = {4, {1, 2, 40, 37}};
    const CtShape q80 = {4, {1, 1, 20, 80}}, kv80 = {4, {1, 1, 19, 80}};
    const CtShape st = {3, {1, 2, 40}}, st80 = {3, {1, 1, 20}}; /* the forward's rows' logsumexp */
    const CtShape x = {3, {1, 37, 40}}, w = {1, {40}}, xl = {3, {1, 1600, 40}};
    const CtShape x160 = {3, {1, 37, 160}}, w160 = {1, {160}}, x8 = {2, {70, 8}}, w8 = {1, {8}};
    const CtShape x640 = {2, {37, 640}}, w640 = {1, {640}};
    const CtShape xb = {4, {4, 3, 20, 20}}, c3 = {1, {3}}, rows = {2, {1600, 3}};
    const CtShape xn = {4, {4, 96, 10, 10}}, c96 = {1, {96}};
    static const struct {
        CtOp op;
        int nin;
        int64_t i;
        double f;
        const char *what;
        long long items;    /* the first launch's work items (0: any) */
        const char *kernel; /* the first launch's kernel (NULL: any) */
        int nhwc;           /* the 4-D values channels-last */
    } cases[] = {{CT_OP_sdpa, 4, 0, 0.3, "sdpa in tiles", 0, NULL, 0},
                 {CT_OP_sdpa_grad, 7, 1, 0.3, "sdpa_grad in tiles", 0, NULL, 0},
                 {CT_OP_sdpa, 3, 0, 0.3, "sdpa at head dim 80", 0, NULL, 0},
                 {CT_OP_sdpa_grad, 6, 0, 0.3, "sdpa_grad at head dim 80", 0, NULL, 0},
                 {CT_OP_layer_norm, 3, 0, 1e-5, "layer_norm", 160, "ct_layer_norm_f32", 0},
                 {CT_OP_layer_norm_grad, 3, 0, 1e-5, "layer_norm_grad", 160, "ct_layer_norm_grad_x_rows_f32", 0},
                 {CT_OP_layer_norm_grad, 3, 0, 1e-5, "layer_norm_grad of 1600 rows", 6400, NULL, 0},
                 {CT_OP_layer_norm, 3, 0, 1e-5, "layer_norm of rows of 160", 320, NULL, 0},
                 {CT_OP_layer_norm_grad, 3, 0, 1e-5, "layer_norm_grad of rows of 160", 320,
                  "ct_layer_norm_grad_x_rows_f32", 0},
                 {CT_OP_layer_norm, 3, 0, 1e-5, "layer_norm of rows of 8", 64, NULL, 0},
                 {CT_OP_layer_norm_grad, 3, 0, 1e-5, "layer_norm_grad of rows of 8", 64,
                  "ct_layer_norm_grad_x_rows_f32", 0},
                 {CT_OP_layer_norm, 3, 0, 1e-5, "layer_norm of rows of 640", 37 * 32, "ct_layer_norm_f32", 0},
                 {CT_OP_layer_norm_grad, 3, 0, 1e-5, "layer_norm_grad of rows of 640", 37 * 32,
                  "ct_layer_norm_grad_x_f32", 0},
                 {CT_OP_batch_norm, 5, 1, 0.1, "batch_norm, NCHW in 3 columns of 7 slices", 21 * 256,
                  "ct_bn_stats_f32", 0},
                 {CT_OP_batch_norm_grad, 5, 1, 1e-5, "batch_norm_grad, NCHW in 3 columns of 7 slices", 21 * 256,
                  "ct_bn_grad_stats_f32", 0},
                 {CT_OP_batch_norm, 5, 1, 0.1, "batch_norm, NHWC in 3 columns of 13 slices", 39 * 256,
                  "ct_bn_stats_f32", 1},
                 {CT_OP_batch_norm_grad, 5, 1, 1e-5, "batch_norm_grad, NHWC in 3 columns of 13 slices", 39 * 256,
                  "ct_bn_grad_stats_f32", 1},
                 {CT_OP_reduce_sum, 1, 1, 0, "reduce_sum of 1600 rows in 50 slices", 50 * 256, "ct_reduce_sum_cols_f32",
                  0},
                 {CT_OP_concat, 2, 1, 0, "concat along C in 16-byte copies", 96, "ct_copy_f32", 0}};
    const CtShape shapes[][7] = {{q, kv, kv, bias},
                                 {q, kv, kv, q, q, st, bias},
                                 {q80, kv80, kv80},
                                 {q80, kv80, kv80, q80, q80, st80},
                                 {x, w, w},
                                 {x, w, x},
                                 {xl, w, xl},
                                 {x160, w160, w160},
                                 {x160, w160, x160},
                                 {x8, w8, w8},
                                 {x8, w8, x8},
                                 {x640, w640, w640},
                                 {x640, w640, x640},
                                 {xb, c3, c3, c3, c3},
                                 {xb, c3, c3, c3, xb},
                                 {xn, c96, c96, c96, c96},
                                 {xn, c96, c96, c96, xn},
                                 {rows},
                                 {{4, {2, 6, 4, 8}}, {4, {2, 2, 4, 8}}}};
    enum { NCASES = sizeof cases / sizeof *cases };
    for (int i = 0; i < NCASES; i++) {
        Graph g;
        int id = node_on(&g, cases[i].op, cases[i].nin, shapes[i], cases[i].i, cases[i].f);
        for (ValueId v = 0; cases[i].nhwc && v < g.nvalues; v++)
            if (g.values[v].type.shape.ndim == 4)
                g.values[v].layout = CT_LAYOUT_CHANNELS_LAST;
        char first[48] = "";
        long long items = id >= 0 ? check_lib_node(m, &g, id, cases[i].what, first) : -1;
        CHECKF(!cases[i].items || items == cases[i].items, "%s: %lld work items, not %lld", cases[i].what, items,
               cases[i].items);
        CHECKF(!cases[i].kernel || !strcmp(first, cases[i].kernel), "%s: kernel %s, not %s", cases[i].what, first,
               cases[i].kernel);
        graph_free(&g);
    }
    sim_module_free(m);
}

int main(void)
{
    char cache[] = "/tmp/ctimm-test-simt-XXXXXX";
    if (!mkdtemp(cache)) {
        CHECKF(0, "no temporary folder for the kernel cache");
        return check_done("test_simt");
    }
    setenv("CTIMM_CACHE_DIR", cache, 1);
    static char names[][48] = {"block_sum", "block_sum_racy", "warps", "read_early", "atomics",
                               "early_exit", "split_wait", "bad_mask", "traps"};
    int n = (int)(sizeof names / sizeof *names);
    SimModule *m = build("the test kernels", kernels, names, n);
    static char snames[3][48] = {"axpy", "convert", "store_to"};
    SimModule *s = build("the straight kernels", straight_kernels, snames, 3);
    if (m && s) {
        test_barriers(m);
        test_poison(m);
        test_warps(m);
        test_atomics(m);
        test_failures(m);
        test_speed(m, s);
        test_conversions(s);
        test_bounds(s);
    }
    sim_module_free(m);
    sim_module_free(s);
    test_generated();
    test_vector_parts();
    test_library();
    test_model_kernels();
    test_rm_tree(cache);
    return check_done("test_simt");
}
