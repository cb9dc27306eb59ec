/*
 * bench_train_step: training throughput (samples/s) of one model's whole
 * training step on a ctimm backend, measured the way timm's benchmark.py
 * measures `--bench train`, so bench/run_train_cpu.sh can put the two side
 * by side.
 *
 * What benchmark.py's TrainBenchmarkRunner does, and what this does too:
 * create_model(name, drop_rate 0, drop_path_rate None) in train mode;
 * create_optimizer_v2(model, opt='sgd', lr=1e-4): timm's 'sgd' is SGD with
 * nesterov momentum 0.9 and, since no weight_decay is passed, none;
 * nn.CrossEntropyLoss() without label smoothing; the input one
 * torch.randn((B, 3, H, W)) batch made once; a fresh random target
 * [B] in [0, num_classes) every step; --num-warm-iter 10 untimed steps, then
 * --num-bench-iter 40 timed ones. It prints samples/s as all samples over
 * the wall time of the timed loop, and ms/step as the mean of the steps.
 * With --amp: autocast to float16 and no GradScaler (benchmark.py has none),
 * so the loss scale is 1 and no step is skipped.
 *
 * Per step here: a new target, the backend's run of the train graph
 * (forward, loss, backward, update; the cpu backend's plan and compiled
 * kernels come from its cache after the first step), freeing its outputs.
 *
 * --gemm N also times cblas_sgemm on N x N x N f32 (the BLAS the cpu
 * backend's convolutions and linears go through, at OPENBLAS_NUM_THREADS)
 * and prints its GFLOP/s: the ceiling the notes compare against.
 *
 * Output: progress lines like benchmark.py's on stderr, then one line on
 * stdout that run_train_cpu.sh parses: "ctimm train model=<m> batch=<b>
 * img=<n> ... samples_per_s=<r> ms_per_step=<t> ..." (cpu_ms_per_step is the
 * process's CPU time, all threads, per timed step; gflop_per_step is
 * 3 x 2 x forward MACs x batch, the floor's arithmetic).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "models/registry.h"
#include "passes/pipeline.h"
#include "passes/stats.h"
#include "runtime/backend.h"
#include "runtime/state.h"

static const char usage[] =
    "usage: bench_train_step --model NAME [--batch-size 32] [--img-size N] [--steps 40] [--warmup 10]\n"
    "                        [--backend cpu|ref] [--amp] [--channels-last] [--seed 0] [--gemm N]\n";

typedef struct Opts {
    const char *model, *backend;
    int batch, img, steps, warmup, amp, channels_last, gemm;
    unsigned seed;
} Opts;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) of the whole process, all threads. */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* splitmix64: the random input and targets (their values do not matter,
 * only that they are not zeros). */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) { return ((double)(next_u64(s) >> 11) + 0.5) * 0x1p-53; }

/* torch.randn's distribution (Box-Muller), not its stream. */
static void fill_randn(float *x, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2 * log(next_unit(s))), t = 6.283185307179586 * next_unit(s);
        x[i] = (float)(r * cos(t));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(t));
    }
}

static int parse_int(const char *flag, const char *v, int lo, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > (1 << 24)) {
        fprintf(stderr, "bench_train_step: %s expects an integer >= %d\n", flag, lo);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse(int argc, char **argv, Opts *o)
{
    *o = (Opts){.backend = "cpu", .batch = 32, .steps = 40, .warmup = 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *dst = !strcmp(a, "--batch-size") || !strcmp(a, "-b") ? &o->batch
                 : !strcmp(a, "--img-size")                        ? &o->img
                 : !strcmp(a, "--steps")                           ? &o->steps
                 : !strcmp(a, "--warmup")                          ? &o->warmup
                 : !strcmp(a, "--gemm")                            ? &o->gemm
                                                                   : NULL;
        if (dst) {
            if (parse_int(a, v, dst == &o->warmup || dst == &o->img || dst == &o->gemm ? 0 : 1, dst))
                return -1;
            i++;
        } else if (!strcmp(a, "--model") && v) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--backend") && v) {
            o->backend = argv[++i];
        } else if (!strcmp(a, "--seed") && v) {
            o->seed = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--amp")) {
            o->amp = 1;
        } else if (!strcmp(a, "--channels-last")) {
            o->channels_last = 1;
        } else {
            fprintf(stderr, "bench_train_step: unknown or incomplete option '%s'\n%s", a, usage);
            return -1;
        }
    }
    if (!o->model && !o->gemm) {
        fprintf(stderr, "bench_train_step: --model NAME is required\n%s", usage);
        return -1;
    }
    return 0;
}

/* GFLOP/s of cblas_sgemm, n x n x n, median of 5 after one untimed. */
static void gemm_probe(int n)
{
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    uint64_t s = 1;
    if (!a || !b || !c) {
        fprintf(stderr, "bench_train_step: out of memory for --gemm %d\n", n);
        goto done;
    }
    fill_randn(a, nn, &s);
    fill_randn(b, nn, &s);
    double t[5];
    for (int r = -1; r < 5; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (r >= 0)
            t[r] = now() - t0;
    }
    qsort(t, 5, sizeof *t, cmp_double);
    printf("ctimm gemm n=%d threads=%d ms=%.3f gflop_per_s=%.1f\n", n, openblas_get_num_threads(), t[2] * 1e3,
           2.0 * n * n * (double)n / t[2] * 1e-9);
done:
    free(a);
    free(b);
    free(c);
}

/* The train graph as benchmark.py's train mode builds it: forward (under
 * autocast with --amp), cross-entropy, backward, SGD-nesterov update; and
 * the forward's MACs per image, counted before the training step. */
static int build(const Opts *o, const ModelEntry *m, Graph *g, TrainStep *ts, double *gmacs, CtErr *err)
{
    ModelSpec spec = {.batch_size = o->batch, .training = 1, .args = model_args_default()};
    spec.args.img_size = o->img;
    OptimSpec opt;
    if (optim_defaults("sgd", &opt))
        return ct_fail(err, "optimizer sgd is not implemented");
    opt.weight_decay = 0; /* create_optimizer_v2(model, opt='sgd', lr=1e-4): weight_decay 0 */
    opt.no_weight_decay = m->no_weight_decay;
    if (model_build(m, &spec, g, err))
        return -1;
    GraphStats st;
    if (graph_stats(g, &(StatsOptions){.count_attention = 1}, &st, err))
        return -1;
    *gmacs = (double)st.macs / o->batch * 1e-9;
    Pipeline p = {.training = 1, .loss = {CT_LOSS_CROSS_ENTROPY, 0, -1, 0}, .opt = opt, .amp = o->amp,
                  .amp_dtype = CT_F16, .channels_last = o->channels_last, .verify = PIPELINE_VERIFY,
                  .remat = {.cheap = 1}};
    PipelineResult r;
    if (pipeline_run(&p, g, &r, err))
        return -1;
    *ts = r.ts;
    return 0;
}

int main(int argc, char **argv)
{
    Opts o;
    if (parse(argc, argv, &o))
        return 2;
    if (o.gemm)
        gemm_probe(o.gemm);
    if (!o.model)
        return 0;
    const ModelEntry *m = model_find(o.model);
    const CtBackend *be = backend_find(o.backend);
    if (!m || !be) {
        fprintf(stderr, "bench_train_step: no %s '%s'\n", m ? "backend" : "model", m ? o.backend : o.model);
        return 2;
    }
    ModelArgs ma = model_args_default();
    ma.img_size = o.img;
    int img = model_img_size(m, &ma), classes = model_num_classes(m, &ma), rc = 1;
    Graph g = {0};
    TrainStep ts = {0};
    CtState state = {0};
    CtRunner run = {0};
    CtErr err = {0};
    double gmacs = 0, t0 = now();
    if (build(&o, m, &g, &ts, &gmacs, &err) || backend_check(be, &g, &err)) {
        fprintf(stderr, "bench_train_step: %s: %s\n", o.model, err.msg);
        goto free_graph;
    }
    state_create(&state, &g);
    state_init(&state, o.seed);
    double setup_s = now() - t0;

    size_t nx = (size_t)o.batch * 3 * img * img;
    float *x = malloc(nx * sizeof *x), lr = 1e-4f, scale = 1;
    int64_t *target = malloc((size_t)o.batch * sizeof *target);
    CtTensor *out = calloc((size_t)g.noutputs + 1, sizeof *out);
    double *step_s = calloc((size_t)o.steps, sizeof *step_s);
    if (!x || !target || !out || !step_s) {
        fprintf(stderr, "bench_train_step: out of memory\n");
        goto free_buffers;
    }
    uint64_t rng = 0x5eedull + o.seed;
    fill_randn(x, nx, &rng);
    CtTensor in[4] = {{{{4, {o.batch, 3, img, img}}, CT_F32}, x},
                      {{{1, {o.batch}}, CT_I64}, target},
                      {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    fprintf(stderr, "Running train benchmark on %s for %d steps w/ input size (3, %d, %d) and batch size %d, "
                    "backend %s, %d BLAS threads.\n",
            o.model, o.steps, img, img, o.batch, be->name, openblas_get_num_threads());
    double first_step_s = 0, run_t0 = 0, run_c0 = 0, total = 0, loss = NAN;
    for (int i = -o.warmup; i < o.steps; i++) {
        if (i == 0) {
            run_t0 = now();
            run_c0 = cpu_now();
        }
        double ts0 = now();
        for (int b = 0; b < o.batch; b++)
            target[b] = (int64_t)(next_u64(&rng) % (uint64_t)classes);
        /* the first step compiles */
        if ((!run.prog && backend_open(&run, be, &g, &state, NULL, &err)) || backend_step(&run, in, 4, out, &err)) {
            fprintf(stderr, "bench_train_step: %s, step %d: %s\n", o.model, i + o.warmup, err.msg);
            goto free_buffers;
        }
        loss = *(const float *)out[1].data;
        for (int k = 0; k < g.noutputs; k++)
            tensor_free(&out[k]);
        double dt = now() - ts0;
        if (i == -o.warmup)
            first_step_s = dt;
        if (i < 0)
            continue;
        step_s[i] = dt;
        total += dt;
        int log_freq = o.steps / 5 > 0 ? o.steps / 5 : 1;
        if ((i + 1) % log_freq == 0)
            fprintf(stderr, "Train [%d/%d]. %.2f samples/sec. %.3f ms/step. loss %.4f\n", i + 1, o.steps,
                    (double)o.batch * (i + 1) / total, 1e3 * total / (i + 1), loss);
    }
    double elapsed = now() - run_t0, cpu = cpu_now() - run_c0;
    qsort(step_s, (size_t)o.steps, sizeof *step_s, cmp_double);
    double gflop = 3 * 2 * gmacs * o.batch, sps = (double)o.batch * o.steps / elapsed;
    printf("ctimm train model=%s batch=%d img=%d backend=%s amp=%d channels_last=%d threads=%d steps=%d "
           "samples_per_s=%.2f ms_per_step=%.3f median_ms=%.3f min_ms=%.3f cpu_ms_per_step=%.3f "
           "first_step_s=%.3f setup_s=%.3f fwd_gmacs_per_img=%.4f gflop_per_step=%.3f gflop_per_s=%.2f "
           "loss=%.4f\n",
           o.model, o.batch, img, be->name, o.amp, o.channels_last, openblas_get_num_threads(), o.steps, sps,
           1e3 * total / o.steps, 1e3 * step_s[o.steps / 2], 1e3 * step_s[0], 1e3 * cpu / o.steps, first_step_s,
           setup_s, gmacs, gflop, gflop * o.steps / elapsed, loss);
    rc = isfinite(loss) ? 0 : 1;
    if (rc)
        fprintf(stderr, "bench_train_step: %s: the loss is %g\n", o.model, loss);
free_buffers:
    backend_close(&run);
    free(x);
    free(target);
    free(out);
    free(step_s);
    state_free(&state);
free_graph:
    train_step_free(&ts);
    graph_free(&g);
    return rc;
}
