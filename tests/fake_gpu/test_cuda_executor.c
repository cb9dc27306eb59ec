/* The cuda backend as it runs on a device (runtime/cuda: the executor, its
 * cuDNN and cuBLASLt calls, the step profile), here on the fake GPU
 * (tests/fake_gpu/fake_gpu.h), whose checks fail a call as the device
 * would: every pointer in an allocation with its extent, descriptors that
 * agree, workspaces as large as asked, nothing that waits or allocates in a
 * captured graph, and nothing left open when closed. What the kernels
 * compute is the SIMT harness's test (test_cuda_sim), and what the
 * executor's steps compute test_executor_values'; this is the rest.
 * test_convnext's channels-last f32 SGD step, whose depthwise convolutions
 * have cuDNN twins: with cuDNN made slow, the library's kernels win the
 * timing and the workspace the twins needed is given back; made fast, the
 * twins win, run, and keep theirs; a later process with the same kernel
 * cache times nothing and chooses the same; CTIMM_DWCONV=cudnn with
 * cuDNN's heuristics runs every twin untimed; the step profile's events.
 * Then steps as the benchmark's: test_vit's bf16 AMP step (cuBLASLt's
 * epilogues: bias, GELU with its aux, bias gradients; attention),
 * test_resnet's and test_efficientnet's bf16 and test_convnext's f16 in
 * channels-last (the twins in low precision). Last, test_resnet's folded
 * bf16 inference (cuDNN's fused forward with bias, residual and ReLU) and
 * test_vit's bf16 step (BGRADB) with the libraries refusing those fused
 * forms: the executor's fallbacks; a capture a library call invalidates,
 * cuBLASLt's first candidate refused, cuDNN without depthwise algorithms
 * (no twins), devices too small for the timing
 * or for the plan, a step synchronised after every step. Each loaded
 * program runs three steps: eagerly, captured as a graph, replayed. And
 * the fake's own guard of the bytes past an allocation's end. */
#include "runtime/cuda/backend_cuda.h"
#include "runtime/cuda/driver.h"
#include "tests/fake_gpu/fake_models.h"

#define DW_WORKSPACE ((size_t)96 << 20)

static void check_nothing_open(const char *what)
{
    FakeGpuCounts c;
    fake_gpu_counts(&c);
    CHECKF(!c.allocations && !c.host_allocations && !c.modules && !c.streams && !c.events && !c.graphs &&
               !c.graph_execs && !c.contexts && !c.dnn_handles && !c.dnn_descriptors && !c.lt_handles &&
               !c.lt_descriptors && !c.device_bytes,
           "%s: left open: %ld allocations (%zu bytes), %ld pinned, %ld modules, %ld streams, %ld events, %ld graphs, "
           "%ld executable graphs, %ld context retains, %ld cuDNN handles, %ld cuDNN descriptors, %ld cuBLASLt "
           "handles, %ld cuBLASLt descriptors",
           what, c.allocations, c.device_bytes, c.host_allocations, c.modules, c.streams, c.events, c.graphs,
           c.graph_execs, c.contexts, c.dnn_handles, c.dnn_descriptors, c.lt_handles, c.lt_descriptors);
}

typedef struct Loaded {
    size_t device_bytes;
    long finds, dnn_calls_a_step, launches_a_step, launches_to_load, lt_matmuls_a_step, graph_launches;
    size_t moved[3]; /* by the last step: inputs, outputs, state */
} Loaded;

/* Program p loaded over init's copy and run three times (eager, captured,
 * replayed), the state downloaded, closed; what it did into *out. */
static void load_and_run(const char *what, const CtProgram *p, const Graph *g, const CtState *init,
                         const CtTensor *in, int nin, Loaded *out)
{
    CtErr err;
    CtState s;
    CtExec *e = NULL;
    FakeGpuCounts before, loaded, ran;
    state_create(&s, g);
    memcpy(s.data, init->data, init->nbytes);
    fake_gpu_counts(&before);
    int rc = ct_backend_cuda.prepare(p, &s, &e, &err);
    CHECKF(rc == 0, "%s: loading: %s", what, err.msg);
    fake_gpu_counts(&loaded);
    memset(out, 0, sizeof *out);
    if (rc == 0) {
        out->device_bytes = ct_backend_cuda.device_bytes(e);
        out->finds = loaded.dnn_finds - before.dnn_finds;
        out->launches_to_load = loaded.launches - before.launches;
        CHECKF(out->device_bytes == loaded.device_bytes - before.device_bytes,
               "%s: the executor counts %zu device bytes, it allocated %zu", what, out->device_bytes,
               (size_t)(loaded.device_bytes - before.device_bytes));
        CtTensor *o = calloc((size_t)g->noutputs + 1, sizeof *o);
        CT_ASSERT(o != NULL);
        for (int step = 0; step < 3 && rc == 0; step++) {
            FakeGpuCounts a, b;
            fake_gpu_counts(&a);
            rc = ct_backend_cuda.run(e, in, nin, o, &err);
            CHECKF(rc == 0, "%s: step %d: %s", what, step, err.msg);
            fake_gpu_counts(&b);
            if (step == 0) {
                out->dnn_calls_a_step = b.dnn_calls - a.dnn_calls;
                out->launches_a_step = b.launches - a.launches;
                out->lt_matmuls_a_step = b.lt_matmuls - a.lt_matmuls;
            }
            for (int k = 0; rc == 0 && k < g->noutputs; k++)
                tensor_free(&o[k]);
        }
        free(o);
        if (rc == 0)
            cuda_backend_moved(e, &out->moved[0], &out->moved[1], &out->moved[2]);
        fake_gpu_counts(&ran);
        out->graph_launches = ran.graph_launches - loaded.graph_launches;
        if (rc == 0)
            CHECKF(ran.captures - loaded.captures == (getenv("CTIMM_CUDA_PROFILE") || p->opt.sync_each ? 0 : 1),
                   "%s: %ld captures in three steps", what, ran.captures - loaded.captures);
        if (rc == 0)
            CHECKF(ct_backend_cuda.state_to_host(e, &err) == 0, "%s: the state back: %s", what, err.msg);
        ct_backend_cuda.free(e);
    }
    state_free(&s);
    check_clean(what);
    check_nothing_open(what);
}

static int twins(const CtProgram *p)
{
    int n = 0;
    for (int s = 0; s < p->cuda.lp.nsteps; s++)
        n += p->cuda.lp.steps[s].twin;
    return n;
}

static void convnext(void)
{
    Model m;
    if (model_open(&m, "test_convnext", (Variant){.low = CT_F32, .channels_last = 1}))
        return;
    const CtProgram *p = m.p;
    CHECKF(twins(p) > 0, "test_convnext channels-last f32: no depthwise step has a cuDNN twin");
    fake_gpu_set_depthwise_workspace(DW_WORKSPACE);
    Loaded lib, twin, again, forced, profiled;

    fake_gpu_set_cost("cudnn", 1000);
    choices_in("library-wins");
    load_and_run("test_convnext, the library's kernels faster", p, &m.g, &m.init, m.v.in, 4, &lib);
    CHECKF(lib.finds > 0 && lib.launches_to_load > 0, "the choices were not timed (%ld searches, %ld launches)",
           lib.finds, lib.launches_to_load);

    fake_gpu_set_cost("cudnn", 0.001);
    fake_gpu_set_cost("ct_dw", 1000);
    choices_in("twins-win");
    load_and_run("test_convnext, the twins faster", p, &m.g, &m.init, m.v.in, 4, &twin);
    CHECKF(twin.dnn_calls_a_step >= lib.dnn_calls_a_step + twins(p),
           "the twins won their timing but a step made %ld cuDNN calls, %ld with the library's kernels (%d twins)",
           twin.dnn_calls_a_step, lib.dnn_calls_a_step, twins(p));
    CHECKF(twin.device_bytes >= lib.device_bytes + DW_WORKSPACE / 2,
           "the twins' workspace: %zu device bytes with them, %zu without (the twins ask %zu)", twin.device_bytes,
           lib.device_bytes, DW_WORKSPACE);

    fake_gpu_set_cost("cudnn", 1000); /* a later process reads the choices: the costs no longer matter */
    fake_gpu_set_cost("ct_dw", 1);
    load_and_run("test_convnext, the twins' choices from the cache", p, &m.g, &m.init, m.v.in, 4, &again);
    CHECKF(again.finds == 0 && again.launches_to_load == 0,
           "the cached choices were timed again (%ld searches, %ld launches before the first step)", again.finds,
           again.launches_to_load);
    CHECKF(again.dnn_calls_a_step == twin.dnn_calls_a_step && again.device_bytes == twin.device_bytes,
           "from the cache: %ld cuDNN calls a step and %zu bytes, as timed %ld and %zu", again.dnn_calls_a_step,
           again.device_bytes, twin.dnn_calls_a_step, twin.device_bytes);

    setenv("CTIMM_DWCONV", "cudnn", 1);
    setenv("CTIMM_LIB_CHOICE", "heuristic", 1);
    choices_in("heuristic");
    load_and_run("test_convnext, CTIMM_DWCONV=cudnn with cuDNN's heuristics", p, &m.g, &m.init, m.v.in, 4, &forced);
    CHECKF(forced.finds == 0 && forced.launches_to_load == 0, "heuristics: %ld searches, %ld launches", forced.finds,
           forced.launches_to_load);
    CHECKF(forced.dnn_calls_a_step == twin.dnn_calls_a_step, "CTIMM_DWCONV=cudnn: %ld cuDNN calls a step, not %ld",
           forced.dnn_calls_a_step, twin.dnn_calls_a_step);
    unsetenv("CTIMM_DWCONV");
    unsetenv("CTIMM_LIB_CHOICE");

    setenv("CTIMM_CUDA_PROFILE", "1", 1);
    choices_in("profile");
    load_and_run("test_convnext, profiled", p, &m.g, &m.init, m.v.in, 4, &profiled);
    unsetenv("CTIMM_CUDA_PROFILE");
    printf("test_convnext channels-last f32 on the fake GPU: %d twins; %zu device bytes with the library's kernels, "
           "%zu with the twins; %ld cuDNN calls a step, %ld with the twins\n",
           twins(p), lib.device_bytes, twin.device_bytes, lib.dnn_calls_a_step, twin.dnn_calls_a_step);
    model_close(&m);
}

/* A model's step as ctimm-bench runs it, the choices timed: the inputs
 * uploaded once, the outputs left on the device, so that the steps after
 * the first move nothing between host and device. */
static void bench_like(const char *name, CtDType low, int channels_last)
{
    Model m;
    if (model_open(&m, name, (Variant){.low = low, .channels_last = channels_last, .bench = 1}))
        return;
    fake_gpu_set_cost("cudnn", 1); /* every call alike: each way of a twin costs its number of calls */
    fake_gpu_set_cost("ct_dw", 1);
    Loaded l;
    char what[128];
    snprintf(what, sizeof what, "%s amp %s%s", name, low == CT_BF16 ? "bf16" : "f16",
             channels_last ? " channels-last" : "");
    choices_in(name);
    load_and_run(what, m.p, &m.g, &m.init, m.v.in, 4, &l);
    CHECKF(!l.moved[0] && !l.moved[1] && !l.moved[2], "%s: the third step moved %zu, %zu and %zu bytes", what,
           l.moved[0], l.moved[1], l.moved[2]);
    CHECKF(l.graph_launches == 2, "%s: %ld graph launches in three steps (the second's capture and the third)",
           what, l.graph_launches);
    printf("%s on the fake GPU: %zu device bytes, %d twins, %ld cuDNN calls a step\n", what, l.device_bytes,
           twins(m.p), l.dnn_calls_a_step);
    model_close(&m);
}

/* Inference with the batch norms folded (convolutions with a bias, a
 * residual and ReLU: cuDNN's fused forward) and test_vit's training step
 * (its linear layers' bias gradients in cuBLASLt's BGRADB epilogue), each
 * run as the libraries take them, then with the libraries refusing those
 * fused forms, as they may for a shape on a device: the executor's
 * fallbacks (cuDNN's plain forward and its epilogue calls after it; the
 * bias gradient's own reduction) run, and make more calls a step. */
static void refused(const char *name, Variant va, const char *what)
{
    Model m;
    if (model_open(&m, name, va))
        return;
    char label[160];
    Loaded taken, fallback;
    int nin = va.eval ? 1 : 4;
    snprintf(label, sizeof label, "%s, %s taken", name, what);
    choices_in(label + strlen(name) + 2);
    load_and_run(label, m.p, &m.g, &m.init, m.v.in, nin, &taken);
    fake_gpu_refuse(what, 1);
    snprintf(label, sizeof label, "%s, %s refused", name, what);
    choices_in(label + strlen(name) + 2);
    load_and_run(label, m.p, &m.g, &m.init, m.v.in, nin, &fallback);
    fake_gpu_refuse(what, 0);
    long more = va.eval ? fallback.dnn_calls_a_step - taken.dnn_calls_a_step
                        : fallback.launches_a_step - taken.launches_a_step;
    CHECKF(more > 0, "%s: the fallback for %s made no more calls a step (%ld cuDNN calls and %ld launches, taken: %ld "
           "and %ld)", name, what, fallback.dnn_calls_a_step, fallback.launches_a_step, taken.dnn_calls_a_step,
           taken.launches_a_step);
    printf("%s with %s refused: %ld more %s a step\n", name, what, more, va.eval ? "cuDNN calls" : "launches");
    model_close(&m);
}

/* A library call that invalidates the capture (one not capture-safe): the
 * step runs eagerly, that run and every later one, nothing replayed. */
static void capture_refused(void)
{
    Model m;
    if (model_open(&m, "test_resnet", (Variant){.low = CT_BF16, .channels_last = 1, .eval = 1}))
        return;
    Loaded l;
    fake_gpu_refuse("capture", 1);
    choices_in("capture-refused");
    load_and_run("test_resnet, its capture invalidated by a cuDNN call", m.p, &m.g, &m.init, m.v.in, 1, &l);
    fake_gpu_refuse("capture", 0);
    CHECKF(l.graph_launches == 0, "a capture invalidated, yet %ld graph launches", l.graph_launches);
    model_close(&m);
}

/* cuBLASLt's first candidate refused when run, on the heuristics' order
 * (untimed, so the refused one is first): each GEMM runs on the next. */
static void candidate_refused(void)
{
    Model m;
    if (model_open(&m, "test_vit", (Variant){.low = CT_BF16}))
        return;
    Loaded taken, next;
    setenv("CTIMM_LIB_CHOICE", "heuristic", 1);
    choices_in("candidate-taken");
    load_and_run("test_vit, cuBLASLt's heuristics", m.p, &m.g, &m.init, m.v.in, 4, &taken);
    fake_gpu_refuse("cublasLtMatmul algo 1", 1);
    choices_in("candidate-refused");
    load_and_run("test_vit, cuBLASLt's first candidate refused", m.p, &m.g, &m.init, m.v.in, 4, &next);
    fake_gpu_refuse("cublasLtMatmul algo 1", 0);
    unsetenv("CTIMM_LIB_CHOICE");
    CHECKF(next.lt_matmuls_a_step == taken.lt_matmuls_a_step && taken.lt_matmuls_a_step > 0,
           "%ld GEMMs a step on the next candidates, %ld on the first", next.lt_matmuls_a_step,
           taken.lt_matmuls_a_step);
    model_close(&m);
}

/* Program p refused at load, with a message holding both `says`; nothing
 * left open. */
static void load_refused(const char *what, const CtProgram *p, const Graph *g, const CtState *init, const char *says,
                         const char *says_too)
{
    CtErr err;
    CtState s;
    CtExec *e = NULL;
    state_create(&s, g);
    memcpy(s.data, init->data, init->nbytes);
    int rc = ct_backend_cuda.prepare(p, &s, &e, &err);
    CHECKF(rc != 0 && strstr(err.msg, says) && strstr(err.msg, says_too), "%s: %s", what, rc ? err.msg : "loaded");
    if (rc == 0)
        ct_backend_cuda.free(e);
    state_free(&s);
    check_clean(what);
    check_nothing_open(what);
}

/* cuDNN with no algorithm for the depthwise convolutions: the twins are
 * not timed and the library's kernels run; CTIMM_DWCONV=cudnn, which asks
 * for the twins, fails naming the step. */
static void no_twins(void)
{
    Model m;
    if (model_open(&m, "test_convnext", (Variant){.low = CT_F32, .channels_last = 1}))
        return;
    Loaded l;
    fake_gpu_refuse("depthwise", 1);
    choices_in("no-twins");
    load_and_run("test_convnext, cuDNN without depthwise algorithms", m.p, &m.g, &m.init, m.v.in, 4, &l);
    CHECKF(l.launches_to_load == 0 && l.finds > 0, "no twins to time: %ld launches, %ld searches",
           l.launches_to_load, l.finds);
    setenv("CTIMM_DWCONV", "cudnn", 1);
    choices_in("no-twins-forced");
    load_refused("CTIMM_DWCONV=cudnn without depthwise algorithms", m.p, &m.g, &m.init, "(convolution)",
                 "cuDNN has no algorithm");
    unsetenv("CTIMM_DWCONV");
    fake_gpu_refuse("depthwise", 0);
    model_close(&m);
}

/* Small devices. With room for the plan but not for the 256 MiB the
 * libraries' candidates are timed on, nor for the twins' workspace: the
 * heuristics' choices, the twins dropped (the library's kernels, untimed),
 * the step runs. With no room for the plan: out of memory, saying what the
 * plan needs against what the device has. Then a program synchronised
 * after every step. */
static void small_devices(void)
{
    Model m;
    if (model_open(&m, "test_convnext", (Variant){.low = CT_F32, .channels_last = 1}))
        return;
    Loaded l;
    fake_gpu_set_depthwise_workspace(DW_WORKSPACE);
    fake_gpu_set_memory((size_t)64 << 20);
    choices_in("small-device");
    load_and_run("test_convnext on a 64 MiB device", m.p, &m.g, &m.init, m.v.in, 4, &l);
    CHECKF(l.finds == 0 && l.launches_to_load == 0 && l.device_bytes < DW_WORKSPACE,
           "64 MiB: %ld searches, %ld launches timing the twins, %zu device bytes", l.finds, l.launches_to_load,
           l.device_bytes);
    fake_gpu_set_memory((size_t)4 << 20);
    load_refused("test_convnext on a 4 MiB device", m.p, &m.g, &m.init, "out of memory: the plan needs",
                 "ctimm fake GPU has");
    fake_gpu_set_memory(0);
    model_close(&m);

    if (model_open(&m, "test_convnext", (Variant){.low = CT_F32, .channels_last = 1, .sync_each = 1}))
        return;
    choices_in("sync-each");
    load_and_run("test_convnext synchronised after every step", m.p, &m.g, &m.init, m.v.in, 4, &l);
    CHECKF(l.graph_launches == 0, "sync_each: %ld graph launches", l.graph_launches);
    model_close(&m);
}

/* The fake's own guard (fake_gpu.h): a kernel's write one byte past an
 * allocation's end, inside the rounding to 16 bytes before its guard page,
 * is a breach; one into its last byte is not. */
static int poke(void *ctx, const char *kernel, const unsigned grid[3], const unsigned block[3], unsigned shared,
                void **params, char *why, size_t nwhy)
{
    (void)kernel, (void)grid, (void)block, (void)shared, (void)why, (void)nwhy;
    (*(unsigned char **)params[0])[*(const int *)ctx] = 1;
    return 0;
}

static void tail_written(void)
{
    static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                              ".visible .entry poke(\n.param .u64 poke_param_0\n)\n{\nret;\n}\n";
    CudaDriver d;
    CtErr err;
    CUcontext c;
    CUstream s;
    CUmodule m;
    CUfunction f;
    CUdeviceptr p;
    if (cuda_driver_open(&d, &err)) {
        CHECKF(0, "the fake driver: %s", err.msg);
        return;
    }
    if (d.DevicePrimaryCtxRetain(&c, 0) || d.CtxSetCurrent(c) || d.StreamCreate(&s, 1) ||
        d.ModuleLoadData(&m, ptx) || d.ModuleGetFunction(&f, m, "poke") || d.MemAlloc(&p, 13)) {
        const char *v = fake_gpu_violation();
        CHECKF(0, "the guard's test: setting up failed (%s)", v ? v : "no breach");
        return;
    }
    int at = 12;
    FakeGpuRunner r = {&at, poke};
    void *args[] = {&p};
    fake_gpu_compute(&r);
    CHECK(!d.LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL) && !d.StreamSynchronize(s));
    const char *v = fake_gpu_violation();
    CHECKF(!v, "a write into the last byte: %s", v);
    at = 13;
    d.LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
    v = fake_gpu_violation();
    CHECKF(v && strstr(v, "poke wrote byte 0 past the end of a 13-byte allocation"), "a write past the end: %s",
           v ? v : "no breach");
    fake_gpu_reset_violation();
    fake_gpu_compute(NULL);
    CHECK(!d.MemFree(p) && !d.ModuleUnload(m) && !d.StreamDestroy(s) && !d.DevicePrimaryCtxRelease(0));
    cuda_driver_close(&d);
    check_nothing_open("the guard's test");
}

int main(void)
{
    fake_tests_begin("test-executor");
    tail_written();
    convnext();
    bench_like("test_vit", CT_BF16, 0);
    bench_like("test_resnet", CT_BF16, 1);
    bench_like("test_efficientnet", CT_BF16, 1);
    bench_like("test_convnext", CT_F16, 1);
    refused("test_resnet", (Variant){.low = CT_BF16, .channels_last = 1, .eval = 1},
            "cudnnConvolutionBiasActivationForward");
    refused("test_vit", (Variant){.low = CT_BF16}, "BGRADB");
    capture_refused();
    candidate_refused();
    no_twins();
    small_devices();
    fake_tests_end();
    return check_done("test_cuda_executor");
}
