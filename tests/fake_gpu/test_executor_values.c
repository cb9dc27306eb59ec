/* What the executor computes (runtime/cuda: executor.c with blaslt.c's
 * and dnn.c's calls), on the fake GPU computing (fake_gpu_compute): the
 * program's kernels run by the SIMT harness from the same graph compiled
 * for it (the same launch plan, kernel names and arguments), cuBLASLt's
 * and cuDNN's calls computed by the fake from the descriptors blaslt.c and
 * dnn.c give them, read as the libraries document them. Each program runs
 * two steps (eager, then captured and launched) on both the executor and the
 * cuda-sim backend (runtime/cuda_sim: its own copy of the executor's
 * logic, its library calls from our descriptors, checked against ref by
 * the parity tests); the outputs of every step and the state after the
 * last are compared by ||a-b||/||b||. So an executor that gives a kernel
 * or a library the right allocation at the wrong offset, runs its steps or
 * its fallbacks in another order, or describes a GEMM or a convolution to
 * the library otherwise than the harness reads our descriptor, fails here
 * and not only on a device. Programs: SGD steps of test_resnet in f32,
 * test_vit in bf16 (with BGRADB too: the bias gradients' own launches),
 * test_efficientnet in bf16 channels-last (its depthwise steps on the
 * library's kernels, then on their cuDNN twins, each way winning the
 * executor's timing) and test_convnext in f32 and f16 channels-last (the
 * twins), test_vit in f32 too;
 * test_resnet's folded bf16 inference with cuDNN's fused forward, then
 * with its fallback; a step with a device-to-device copy and a batched
 * GEMM; test_resnet's bf16 channels-last step and eval graph in the
 * trainer's order (two steps, the eval graph loaded over the training
 * state, a step, the eval graph told of the new state). The timing of the
 * twins runs steps on the program's buffers before the first run: the
 * values after it say it left nothing behind. */
#include "codegen/cuda/lib_source.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/cuda_sim/simt.h"
#include "tests/fake_gpu/fake_models.h"
#include "tests/graph_nodes.h"

/* Steps a program runs on each side: the executor runs the first eagerly
 * and captures the second as a graph, which it then launches. */
#define STEPS 2

/* The harness's modules of the program compiled for it. */
typedef struct Runner {
    const CtProgram *sim;
    SimModule **gen;
    SimModule *lib[LIB_NTYPES];
    uint64_t seed;
    long launches;
} Runner;

static int run_kernel(void *ctx, const char *kernel, const unsigned grid[3], const unsigned block[3], unsigned shared,
                      void **params, char *why, size_t nwhy)
{
    Runner *r = ctx;
    const CudaProgram *c = &r->sim->cuda;
    SimModule *m = NULL;
    int fn;
    if (sscanf(kernel, "ct_k%d", &fn) == 1) {
        for (int l = 0; !m && l < c->lp.nk; l++)
            if (c->fn[l] == fn && c->unit[l] >= 0)
                m = r->gen[c->unit[l]];
    } else if (lib_kernel_type(kernel) >= 0) {
        m = r->lib[lib_kernel_type(kernel)];
    }
    if (!m) {
        snprintf(why, nwhy, "no module of the harness's program defines it");
        return -1;
    }
    SimLaunch l = {.grid = {grid[0], grid[1], grid[2]}, .block = {block[0], block[1], block[2]},
                   .dyn_shared = shared, .seed = ++r->seed * 0x9E3779B97F4A7C15ull};
    CtErr err;
    r->launches++;
    if (sim_launch(m, kernel, &l, params, &err)) {
        snprintf(why, nwhy, "%s", err.msg);
        return -1;
    }
    return 0;
}

static void runner_free(Runner *r)
{
    for (int j = 0; r->gen && j < r->sim->cuda.nunits; j++)
        sim_module_free(r->gen[j]);
    free(r->gen);
    for (int t = 0; t < LIB_NTYPES; t++)
        sim_module_free(r->lib[t]);
}

static int runner_open(Runner *r, const CtProgram *sim)
{
    const CudaProgram *c = &sim->cuda;
    CtErr err;
    memset(r, 0, sizeof *r);
    r->sim = sim;
    r->gen = calloc((size_t)c->nunits + 1, sizeof *r->gen);
    CT_ASSERT(r->gen != NULL);
    int rc = 0;
    for (int j = 0; !rc && j < c->nunits; j++) {
        const char **names = calloc((size_t)c->lp.nk + 1, sizeof *names);
        char (*buf)[32] = calloc((size_t)c->lp.nk + 1, sizeof *buf);
        CT_ASSERT(names && buf);
        int n = 0;
        for (int l = 0; l < c->lp.nk; l++)
            if (c->unit[l] == j && c->fn[l] == l) {
                snprintf(buf[n], sizeof buf[n], "ct_k%d", l);
                names[n] = buf[n];
                n++;
            }
        rc = sim_module_build(c->units[j].data, names, n, &r->gen[j], &err);
        free(names);
        free(buf);
    }
    for (int t = 0; !rc && t < LIB_NTYPES; t++) {
        int n;
        const char *const *names = lib_kernel_names((LibType)t, &n);
        if (c->lib[t].size)
            rc = sim_module_build(c->lib[t].data, names, n, &r->lib[t], &err);
    }
    CHECKF(rc == 0, "the harness's modules: %s", err.msg);
    if (rc)
        runner_free(r);
    return rc;
}

/* The state and outputs of STEPS steps of p on backend b. */
typedef struct Steps {
    CtState state;
    CtTensor out[STEPS][8];
    int nout;
} Steps;

static int run_steps(const CtBackend *b, const CtProgram *p, const Graph *g, const CtState *init,
                     const CtTensor *in, int nin, Steps *st, const char *what)
{
    CtErr err;
    CtExec *e = NULL;
    memset(st, 0, sizeof *st);
    state_create(&st->state, g);
    memcpy(st->state.data, init->data, init->nbytes);
    st->nout = g->noutputs;
    CT_ASSERT(st->nout <= 8);
    int rc = b->prepare(p, &st->state, &e, &err);
    for (int step = 0; rc == 0 && step < STEPS; step++)
        rc = b->run(e, in, nin, st->out[step], &err);
    if (rc == 0)
        rc = b->state_to_host(e, &err);
    CHECKF(rc == 0, "%s on %s: %s", what, b->name, err.msg);
    if (e)
        b->free(e);
    return rc;
}

static void steps_free(Steps *st)
{
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < st->nout; k++)
            tensor_free(&st->out[s][k]);
    state_free(&st->state);
}

/* ||a-b||/||b|| of n elements of dt; bytes compared where not floats. */
static double diff(const void *a, const void *b, CtDType dt, int64_t n)
{
    double *x = malloc(sizeof *x * (size_t)(n + 1)), *y = malloc(sizeof *y * (size_t)(n + 1));
    CT_ASSERT(x && y);
    double num = 0, den = 0;
    if (elems_to_double(a, dt, n, x) || elems_to_double(b, dt, n, y)) {
        num = memcmp(a, b, (size_t)n * ct_dtype_size(dt)) != 0, den = 1;
    } else {
        for (int64_t i = 0; i < n; i++)
            num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
        num = x[0] != x[0] || y[0] != y[0] ? INFINITY : num; /* a NaN loss is no agreement */
    }
    free(x);
    free(y);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double tensor_diff(const CtTensor *a, const CtTensor *b)
{
    return diff(a->data, b->data, b->type.dtype, shape_numel(&b->type.shape));
}

/* The largest difference of a state tensor of dev's from sim's, and its name. */
static double state_diff(const CtState *dev, const CtState *sim, const char **where)
{
    double worst = 0;
    *where = "";
    for (int i = 0; i < sim->n; i++) {
        const StateEntry *e = &sim->e[i];
        double d = diff(state_data(dev, i), state_data(sim, i), e->type.dtype, shape_numel(&e->type.shape));
        if (d > worst || d != d)
            worst = d, *where = e->name;
    }
    return worst;
}

/* Executor's steps against the harness's: the largest difference of any
 * output of any step, and of any state tensor after the last. */
static void compare(const char *what, const Steps *dev, const Steps *sim, double tol)
{
    double worst_out = 0;
    const char *where;
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < dev->nout; k++) {
            double d = tensor_diff(&dev->out[s][k], &sim->out[s][k]);
            worst_out = d > worst_out ? d : worst_out;
        }
    double worst_state = state_diff(&dev->state, &sim->state, &where);
    CHECKF(worst_out <= tol && worst_state <= tol,
           "%s: the executor's values against the harness's: outputs %.3g, state %.3g (%s), tolerance %.1g", what,
           worst_out, worst_state, where, tol);
    printf("%s: executor against harness, outputs %.3g, state %.3g (%s)\n", what, worst_out, worst_state, where);
}

/* Both sides run the same kernels on the same values and compute the
 * library calls in double, rounded once; here they agree to the bit. The
 * tolerances leave room for a sum in double that rounds the other way on
 * another compiler (one last bit of one element, carried through the
 * steps), far below what a wrong operand gives. */
#define TOL_F32 1e-6
#define TOL_LOW 2e-3

/* Which way depthwise steps with a cuDNN twin run: the executor times
 * both (CTIMM_DWCONV auto) on a clock that makes one win; the harness is
 * told the winner. */
typedef enum { DW_LIB, DW_TWIN } DwWay;

/* Program dev of graph g (compiled for the fake), compiled again for the
 * harness, run on the executor computing and on the harness from init's
 * state and inputs in[nin], compared. With `refuse`, the fake's libraries
 * refuse that fused form (fake_gpu_refuse) on the executor's side: its
 * fallback against the harness's fused call. */
static void check_program(const char *label, const CtProgram *dev, const Graph *g, const CtState *init,
                          const CtTensor *in, int nin, DwWay dw, const char *refuse, double tol)
{
    CtErr err;
    CtProgram *sim = NULL;
    ProgramOptions o = {.cuda_cc = dev->opt.cuda_cc, .cuda_sms = dev->opt.cuda_sms, .cuda_sim = 1};
    compile_in_default_cache();
    int rc = program_compile(g, CT_TARGET_CUDA, &o, &sim, &err);
    CHECKF(rc == 0, "%s: compiling for the harness: %s", label, err.msg);
    CHECKF(rc || (sim->cuda.lp.nsteps == dev->cuda.lp.nsteps && sim->cuda.lp.nk == dev->cuda.lp.nk),
           "%s: the harness's plan has %d steps, the device's %d", label, sim->cuda.lp.nsteps, dev->cuda.lp.nsteps);
    Runner r;
    if (rc || runner_open(&r, sim)) {
        program_free(sim);
        return;
    }
    FakeGpuRunner fr = {&r, run_kernel};
    Steps on_dev, ref;
    choices_in(label);
    fake_gpu_set_cost("cudnn", dw == DW_LIB ? 1000 : 0.001);
    fake_gpu_set_cost("ct_dw", dw == DW_LIB ? 0.001 : 1000);
    if (refuse)
        fake_gpu_refuse(refuse, 1);
    FakeGpuCounts before, after;
    fake_gpu_counts(&before);
    fake_gpu_compute(&fr);
    int ok = run_steps(&ct_backend_cuda, dev, g, init, in, nin, &on_dev, label) == 0;
    fake_gpu_compute(NULL);
    fake_gpu_counts(&after);
    /* the convolutions that make their batch norms' sums: by the graph API's plan, unless refused */
    int stats = 0;
    for (int s = 0; s < dev->cuda.lp.nsteps; s++)
        stats += dev->cuda.lp.steps[s].kind == LP_CONV && dev->cuda.lp.steps[s].conv.stats >= 0;
    long graph_runs = after.dnn_graph_runs - before.dnn_graph_runs;
    CHECKF((graph_runs > 0) == (stats > 0 && !(refuse && !strncmp(refuse, "graph", 5))),
           "%s: %ld runs of cuDNN's graph plans for %d convolutions making sums", label, graph_runs, stats);
    if (refuse)
        fake_gpu_refuse(refuse, 0);
    fake_gpu_set_cost("cudnn", 1);
    fake_gpu_set_cost("ct_dw", 1);
    check_clean(label);
    setenv("CTIMM_DWCONV", dw == DW_LIB ? "lib" : "cudnn", 1);
    ok = run_steps(&ct_backend_cuda_sim, sim, g, init, in, nin, &ref, label) == 0 && ok;
    unsetenv("CTIMM_DWCONV");
    if (ok)
        compare(label, &on_dev, &ref, tol);
    CHECKF(r.launches > 0, "%s: the harness ran none of the executor's launches", label);
    steps_free(&on_dev);
    steps_free(&ref);
    runner_free(&r);
    program_free(sim);
}

/* Model `name`'s SGD step or inference (model_open), checked. */
static void values(const char *name, Variant va, DwWay dw, const char *refuse, const char *label, double tol)
{
    Model m;
    if (model_open(&m, name, va))
        return;
    check_program(label, m.p, &m.g, &m.init, m.v.in, va.eval ? 1 : 4, dw, refuse, tol);
    model_close(&m);
}

/* The trainer's order of runs on one side: the SGD step twice, the state
 * down, the eval graph loaded over that training state (its tensors bound
 * where the larger state has them) and run, one more step, the state down,
 * the eval graph told of it and run again. With runners (the executor's
 * side), each program's kernels run through its own. */
typedef struct Sequence {
    CtState state;
    CtTensor logits[2];
} Sequence;

static int sequence(const CtBackend *b, const CtProgram *tr, const CtProgram *ev, const Graph *g,
                    const CtState *init, const CtTensor *in, const FakeGpuRunner *rt, const FakeGpuRunner *re,
                    Sequence *q, const char *what)
{
    CtErr err;
    CtExec *et = NULL, *ee = NULL;
    CtTensor out[8];
    CT_ASSERT(g->noutputs <= 8);
    memset(q, 0, sizeof *q);
    state_create(&q->state, g);
    memcpy(q->state.data, init->data, init->nbytes);
    if (rt)
        fake_gpu_compute(rt);
    int rc = b->prepare(tr, &q->state, &et, &err);
    for (int step = 0; rc == 0 && step < 3; step++) {
        if (step == 2) {
            if (re)
                fake_gpu_compute(re);
            rc = b->state_to_host(et, &err) || b->prepare(ev, &q->state, &ee, &err) ||
                 b->run(ee, in, 1, &q->logits[0], &err);
            if (rt)
                fake_gpu_compute(rt);
        }
        if (rc == 0 && (rc = b->run(et, in, 4, out, &err)) == 0)
            for (int k = 0; k < g->noutputs; k++)
                tensor_free(&out[k]);
    }
    if (rc == 0 && (rc = b->state_to_host(et, &err)) == 0) {
        if (re)
            fake_gpu_compute(re);
        rc = b->state_from_host(ee, &err) || b->run(ee, in, 1, &q->logits[1], &err);
    }
    fake_gpu_compute(NULL);
    CHECKF(rc == 0, "%s on %s: %s", what, b->name, err.msg);
    if (ee)
        b->free(ee);
    if (et)
        b->free(et);
    return rc;
}

static void sequence_free(Sequence *q)
{
    tensor_free(&q->logits[0]);
    tensor_free(&q->logits[1]);
    state_free(&q->state);
}

/* Model `name`'s training step and its eval graph (batch norms on their
 * running statistics, as validation's), in the trainer's order, on the
 * executor and on the harness: both evals' logits and the state after. */
static void train_then_eval(const char *name, CtDType low, int channels_last, double tol)
{
    char label[128];
    snprintf(label, sizeof label, "%s %s%s, trained then evaluated", name, low == CT_F32 ? "f32" : "bf16",
             channels_last ? " channels-last" : "");
    Model m;
    if (model_open(&m, name, (Variant){.low = low, .channels_last = channels_last}))
        return;
    CtErr err;
    Graph ev;
    ModelSpec spec = {.batch_size = m.v.batch, .args = m.v.args};
    Pipeline pl = {.amp = low != CT_F32, .amp_dtype = low, .channels_last = channels_last, .verify = 1};
    CtProgram *dev_ev = NULL, *sim_tr = NULL, *sim_ev = NULL;
    ProgramOptions od = {.cuda_cc = m.p->opt.cuda_cc, .cuda_sms = m.p->opt.cuda_sms}, os = od;
    os.cuda_sim = 1;
    compile_in_default_cache();
    int built = model_build(m.v.m, &spec, &ev, &err) == 0;
    int rc = !built || pipeline_run(&pl, &ev, NULL, &err) || program_compile(&ev, CT_TARGET_CUDA, &od, &dev_ev, &err) ||
             program_compile(&m.g, CT_TARGET_CUDA, &os, &sim_tr, &err) ||
             program_compile(&ev, CT_TARGET_CUDA, &os, &sim_ev, &err);
    CHECKF(rc == 0, "%s: %s", label, err.msg);
    Runner rt, re;
    if (rc == 0 && runner_open(&rt, sim_tr) == 0) {
        if (runner_open(&re, sim_ev) == 0) {
            FakeGpuRunner frt = {&rt, run_kernel}, fre = {&re, run_kernel};
            Sequence on_dev, ref;
            choices_in(label);
            int ok = sequence(&ct_backend_cuda, m.p, dev_ev, &m.g, &m.init, m.v.in, &frt, &fre, &on_dev, label) == 0;
            check_clean(label);
            ok = sequence(&ct_backend_cuda_sim, sim_tr, sim_ev, &m.g, &m.init, m.v.in, NULL, NULL, &ref, label) == 0 &&
                 ok;
            if (ok) {
                const char *where;
                double d0 = tensor_diff(&on_dev.logits[0], &ref.logits[0]);
                double d1 = tensor_diff(&on_dev.logits[1], &ref.logits[1]);
                double ds = state_diff(&on_dev.state, &ref.state, &where);
                CHECKF(d0 <= tol && d1 <= tol && ds <= tol,
                       "%s: the executor's against the harness's: logits %.3g and %.3g, state %.3g (%s), tolerance "
                       "%.1g", label, d0, d1, ds, where, tol);
                printf("%s: executor against harness, logits %.3g and %.3g, state %.3g (%s)\n", label, d0, d1, ds,
                       where);
            }
            CHECKF(re.launches > 0, "%s: the eval graph's kernels never ran through its runner", label);
            sequence_free(&on_dev);
            sequence_free(&ref);
            runner_free(&re);
        }
        runner_free(&rt);
    }
    program_free(sim_ev);
    program_free(sim_tr);
    program_free(dev_ev);
    if (built)
        graph_free(&ev);
    model_close(&m);
}

/* A step no model's plan has: a batched GEMM (two batches of 3x8 by 8x5,
 * each its own B) whose product a state tensor takes by a device-to-device
 * copy (an assign no kernel took), beside its output. */
static void copy_and_batched_gemm(void)
{
    Graph g;
    graph_init(&g);
    CtType ta = {shape_make(3, (int64_t[]){2, 3, 8}), CT_F32}, tb = {shape_make(3, (int64_t[]){2, 8, 5}), CT_F32};
    CtType ty = {shape_make(3, (int64_t[]){2, 3, 5}), CT_F32};
    ValueId a = graph_add_value(&g, ta, CT_ROLE_INPUT, "a"), b = graph_add_value(&g, tb, CT_ROLE_INPUT, "b");
    ValueId kept = graph_add_value(&g, ty, CT_ROLE_STATE, "kept");
    g.state = malloc(sizeof *g.state); /* graph_free's */
    CT_ASSERT(g.state != NULL);
    g.state[g.nstate++] = kept;
    ValueId y = test_node(&g, CT_OP_matmul, 2, (ValueId[]){a, b}, (int64_t[]){0, 0}, 2, NULL, 0);
    graph_mark_output(&g, test_node(&g, CT_OP_mul, 2, (ValueId[]){y, y}, NULL, 0, NULL, 0));
    test_node(&g, CT_OP_assign, 2, (ValueId[]){kept, y}, NULL, 0, NULL, 0);
    CtTensor in[2];
    tensor_alloc(&in[0], ta);
    tensor_alloc(&in[1], tb);
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < shape_numel(&in[k].type.shape); i++)
            ((float *)in[k].data)[i] = (float)((i * 37 + k * 11) % 17) / 8.0f - 1.0f;
    CtState init;
    state_create(&init, &g);
    CtErr err;
    CtProgram *p = NULL;
    ProgramOptions o = {0};
    compile_in_default_cache();
    int rc = ct_backend_cuda.target_options(&o, &err) || program_compile(&g, CT_TARGET_CUDA, &o, &p, &err);
    CHECKF(rc == 0, "the copy and batched GEMM step: %s", err.msg);
    int copies = 0, batched = 0;
    for (int s = 0; rc == 0 && s < p->cuda.lp.nsteps; s++) {
        const LpStep *st = &p->cuda.lp.steps[s];
        copies += st->kind == LP_COPY;
        batched += st->kind == LP_GEMM && st->gemm.batch == 2 && st->gemm.stride_b != 0;
    }
    CHECKF(rc || (copies == 1 && batched == 1), "the plan has %d copies and %d batched GEMMs, not one of each", copies,
           batched);
    if (rc == 0)
        check_program("a batched GEMM and a device-to-device copy", p, &g, &init, in, 2, DW_LIB, NULL, TOL_F32);
    program_free(p);
    state_free(&init);
    tensor_free(&in[0]);
    tensor_free(&in[1]);
    graph_free(&g);
}

int main(void)
{
    fake_tests_begin("test-executor-values");
    /* Under the sanitizers (the harness's kernels instrumented, 3x slower),
     * the programs whose paths no other takes: the libraries' fallbacks,
     * the twins, the trainer's order, the copy and the batched GEMM. */
    int all = !sim_checks_bounds();
    if (all) {
        values("test_resnet", (Variant){.low = CT_F32}, DW_LIB, NULL, "test_resnet f32", TOL_F32);
        values("test_resnet", (Variant){.low = CT_BF16, .channels_last = 1, .eval = 1}, DW_LIB, NULL,
               "test_resnet bf16 channels-last inference", TOL_LOW);
        values("test_vit", (Variant){.low = CT_BF16}, DW_LIB, NULL, "test_vit bf16", TOL_LOW);
        values("test_vit", (Variant){.low = CT_F32}, DW_LIB, NULL, "test_vit f32", TOL_F32);
        values("test_efficientnet", (Variant){.low = CT_BF16, .channels_last = 1}, DW_LIB, NULL,
               "test_efficientnet bf16 channels-last, the library's depthwise kernels", TOL_LOW);
        values("test_convnext", (Variant){.low = CT_F32, .channels_last = 1}, DW_TWIN, NULL,
               "test_convnext f32 channels-last, the cuDNN twins", TOL_F32);
        values("test_convnext", (Variant){.low = CT_F16, .channels_last = 1}, DW_TWIN, NULL,
               "test_convnext f16 channels-last, the cuDNN twins", TOL_LOW);
    }
    /* the fallback rounds to bf16 after the convolution, and again after the bias: a rounding of bf16's more */
    values("test_resnet", (Variant){.low = CT_BF16, .channels_last = 1, .eval = 1}, DW_LIB,
           "cudnnConvolutionBiasActivationForward",
           "test_resnet bf16 channels-last inference, cuDNN's fused forward refused", 2e-2);
    values("test_vit", (Variant){.low = CT_BF16}, DW_LIB, "BGRADB", "test_vit bf16, BGRADB refused", TOL_LOW);
    /* no graph engine for a convolution with its batch norm's sums: the statistics pass after the plain
     * call, against the harness's call making them (the trainer's order below has the engine) */
    values("test_resnet", (Variant){.low = CT_BF16, .channels_last = 1}, DW_LIB, "graph",
           "test_resnet bf16 channels-last, cuDNN's convolution with statistics refused", TOL_LOW);
    values("test_resnet", (Variant){.low = CT_BF16, .channels_last = 1}, DW_LIB, "graph run",
           "test_resnet bf16 channels-last, cuDNN's convolution with statistics refused when run", TOL_LOW);
    values("test_efficientnet", (Variant){.low = CT_BF16, .channels_last = 1}, DW_TWIN, NULL,
           "test_efficientnet bf16 channels-last, the cuDNN twins", TOL_LOW);
    train_then_eval("test_resnet", CT_BF16, 1, TOL_LOW);
    copy_and_batched_gemm();
    if (!all)
        printf("test_executor_values: under the sanitizers, 7 programs left to the plain build\n");
    fake_tests_end();
    return check_done("test_executor_values");
}
