/*
 * ctimm-bench: timm's benchmark.py on compiled graphs. The same flags,
 * defaults and result columns (model, infer_samples_per_sec, infer_step_time,
 * infer_batch_size, infer_img_size, infer_gmacs, infer_macts, train_*,
 * param_count, rounded as benchmark.py rounds them), so a ctimm CSV joins a
 * timm CSV on the model column.
 *
 * inference: the eval graph (bn_fold, amp, channels-last) on one random
 * batch; train: the whole training step (forward, CrossEntropyLoss, backward
 * and the --opt update with benchmark.py's create_optimizer_v2(model, opt,
 * lr=1e-4): momentum 0.9, no weight decay) on a random batch and random
 * targets. --num-warm-iter steps first, then --num-bench-iter timed steps:
 * samples/s over the timed run's wall time and the mean step time, as
 * benchmark.py computes them (the median is logged too); building and
 * compiling the graph are outside the timed region and logged apart.
 * gmacs/macts/param_count come from the stats pass (fvcore's counts, with
 * attention's two matmuls counted, as in timm's published CSVs from torch
 * 1.13 and 2.4 and from Debian's torch here; 2.1's fused them). Out of memory is the memory plan's
 * peak against the memory available ($CTIMM_MEMORY_LIMIT bytes, else the
 * GPU's free memory with --device cuda, the machine's available RAM
 * without), checked before a run: then the batch size decays
 * as benchmark.py's decay_batch_step does and the run is retried (unless
 * --no-retry).
 *
 * Memory (ctimm's columns after benchmark.py's, which has none):
 * <bench>_peak_planned_mib, the peak the memory plan knows before anything
 * runs (the step's arena, parameters, buffers, optimizer state, inputs and
 * outputs: what the out-of-memory check compares), and with a host device
 * (cpu, ref, cuda-sim) <bench>_peak_rss_mib, the process's measured peak
 * resident memory during the run (build, compile and steps: what
 * /usr/bin/time reports for one model), and on a device backend (cuda,
 * cuda-sim) <bench>_peak_device_mib, the device memory the program
 * allocated (all of it when prepared, so its peak: the bytes
 * torch.cuda.max_memory_allocated counts on PyTorch's side).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli/common.h"
#include "passes/pipeline.h"
#include "passes/plan.h"
#include "passes/stats.h"
#include "runtime/backend.h"
#include "train/eval_data.h"
#include "train/pretrained.h"
#include "runtime/cuda/backend_cuda.h"

static const char *const prog = "ctimm-bench";

static const char *const usage =
    "usage: ctimm-bench [-m|--model resnet50] [--model-list FILE] [--bench inference|train|both|profile]\n"
    "                   [-b 256] [--img-size N] [--input-size C H W] [--use-train-size] [--in-chans 3]\n"
    "                   [--num-classes N]\n"
    "                   [--channels-last] [--grad-checkpointing] [--memory-budget BYTES] [--keep-activations]\n"
    "                   [--amp] [--amp-dtype float16|bfloat16] [--precision float32|amp|amp_bfloat16]\n"
    "                   [--num-warm-iter 10] [--num-bench-iter 40] [--detail] [--no-retry]\n"
    "                   [--results-file FILE] [--results-format csv|json] [--device cpu|cuda|cuda-sim|ref]\n"
    "                   [--opt sgd] [--opt-eps EPS] [--opt-betas B1 B2] [--drop 0] [--drop-path P]\n"
    "                   [--pretrained] [--gp POOL] [--model-kwargs K=V ...]\n"
    "Without --img-size or --input-size each model runs at its weights' test-time input size where they have\n"
    "one (resnet50.a1_in1k: 288), as benchmark.py's resolve_data_config; --use-train-size keeps training's.\n"
    "--pretrained runs timm's weights of each model (its default tag, or name one: resnet50.a1_in1k) from the\n"
    "Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) at their input size.\n"
    "--in-chans N (ctimm's; benchmark.py builds 3) builds each model for N-channel images, as\n"
    "create_model(in_chans=N), its pretrained first conv adapted as timm's adapt_input_conv.\n"
    "--gp token|avg|map (convnets: avg) and --model-kwargs (Python literals: img_size of a ViT, at the bench's\n"
    "size, and a ViT's class_token, reg_tokens, fc_norm, no_embed_class, init_values, qkv_bias) go to each model\n"
    "as benchmark.py's create_model(global_pool=, **model_kwargs); the keys benchmark.py passes itself are refused.\n";

typedef struct Args {
    const char *model, *model_list, *bench, *precision, *amp_dtype, *results_file, *results_format, *device, *opt;
    int batch_size, img_size, num_classes, channels_last, amp, warm, iters, detail, no_retry, n_input, n_betas;
    int pretrained, in_chans; /* in_chans: resolved in main (--in-chans, else --input-size's, else 3) */
    int use_train_size;
    int grad_ckpt;   /* --grad-checkpointing: each block recomputed in the backward */
    size_t budget;   /* --memory-budget (ctimm's): bytes the training step's plan must fit */
    int keep_acts;   /* --keep-activations (ctimm's): no cheap recomputation (RematSpec.cheap) */
    double input_size[3], opt_eps, opt_betas[2], drop, drop_path;
    const char *gp, *model_kwargs[CT_MAX_MODEL_KWARGS];
    int n_model_kwargs;
    ModelArgs kw; /* --gp's and --model-kwargs' options and img_size (cli_model_options) */
} Args;

/* benchmark.py flags ctimm-bench does not implement: refused by name. */
static const char *const refused[] = {"torchscript", "torchcompile", "aot-autograd", "fuser", "fast-norm", "reparam",
                                      "torchcompile-mode", "drop-block",
                                      NULL};

/* One result: the ordered columns of benchmark.py's dict. */
typedef struct Row {
    char model[128];
    const char *keys[24];
    double vals[24];
    int ints[24]; /* the value is an integer column (batch and image size) */
    int n;
    double planned[2], rss[2], dev[2]; /* MiB, inference's and training's (< 0: not measured) */
    char error[sizeof(CtErr)];
} Row;

static void put(Row *r, const char *k, double v, int is_int)
{
    r->keys[r->n] = k;
    r->vals[r->n] = v;
    r->ints[r->n++] = is_int;
}

static double round_to(double v, int places)
{
    double s = pow(10, places);
    return round(v * s) / s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* benchmark.py's decay_batch_step(batch_size, num_intra_steps=2). */
static int decay_batch(int b)
{
    if (b <= 1)
        return 0;
    int base = 1;
    while (base * 2 <= b - 1)
        base *= 2;
    int step = base / 2 > 1 ? base / 2 : 1;
    return base + ((b - base - 1) / step) * step;
}

/* $CTIMM_MEMORY_LIMIT, else the device's free memory: the GPU's, or the
 * machine's available RAM. */
static double memory_available(const char *device)
{
    const char *lim = getenv("CTIMM_MEMORY_LIMIT");
    if (lim && *lim)
        return strtod(lim, NULL);
    if (!strcmp(device, "cuda"))
        return (double)cuda_backend_free_bytes();
    return (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

/* The process's peak resident memory is measured from here: Linux resets
 * its high-water mark (VmHWM) to the memory resident now when 5 is written
 * to /proc/self/clear_refs, so each run of a list has its own peak. */
static void peak_rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* Bytes: VmHWM, else (no /proc) getrusage's peak of the whole process. */
static double peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kib = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    if (kib < 0) {
        struct rusage ru;
        kib = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss : 0;
    }
    return kib * 1024;
}

/* The graphs of one run: eval, or the train step (and with --detail the
 * forward alone and forward + backward, whose differences are the phases). */
typedef struct Bench {
    Graph g[3];
    TrainStep ts[3];
    int ng;
    CtState st[3];
    CtRunner run[3]; /* each graph compiled and prepared over its state */
} Bench;

static void bench_free(Bench *b)
{
    for (int k = 0; k < b->ng; k++) {
        backend_close(&b->run[k]);
        if (b->st[k].e)
            state_free(&b->st[k]);
        train_step_free(&b->ts[k]);
        graph_free(&b->g[k]);
    }
}

/* Builds the graph(s) for one run, their state initialised or (--pretrained)
 * loaded from pre. 1 when they would not fit in memory. */
static int bench_build(const Args *a, Pretrained *pre, int train, int batch, int img, CtDType amp, Bench *b,
                       double *need, CtErr *err)
{
    const ModelEntry *m = &pre->m;
    memset(b, 0, sizeof *b);
    int classes = a->num_classes > 0 ? a->num_classes : m->cfg.num_classes;
    b->ng = train && a->detail ? 3 : 1;
    for (int k = 0; k < b->ng; k++) {
        Graph *g = &b->g[k];
        if (!train) {
            if (eval_graph(m, &a->kw.opt, batch, classes, img, a->in_chans, amp, a->channels_last, NULL, NULL, g, err))
                return -1;
            continue;
        }
        /* benchmark.py's targets random_(num_classes) fail the same way */
        if (classes == 0)
            return ct_fail(err, "%s has no classifier (num_classes 0) to train: give --num-classes N", m->name);
        ModelSpec spec = {.batch_size = batch, .training = 1,
                          .args = {.num_classes = classes, .img_size = img, .in_chans = a->in_chans,
                                   .drop_rate = a->drop, .drop_path_rate = a->drop_path, .opt = a->kw.opt}};
        if (model_build(m, &spec, g, err))
            return -1;
        OptimSpec opt;
        if (optim_defaults(a->opt, &opt))
            return ct_fail(err, "--opt %s is not implemented (%s)", a->opt, optim_names);
        if (a->opt_eps >= 0)
            opt.eps = a->opt_eps;
        if (a->n_betas > 0)
            opt.beta1 = a->opt_betas[0];
        if (a->n_betas > 1)
            opt.beta2 = a->opt_betas[1];
        opt.weight_decay = 0; /* create_optimizer_v2(model, opt, lr): its default */
        opt.no_weight_decay = m->no_weight_decay;
        opt.skip_nonfinite = amp == CT_F16;
        if (k < 2 && b->ng == 3) /* --detail: forward only (k 0), forward + backward (k 1) */
            opt.kind = CT_OPT_NONE;
        Pipeline p = {.training = k > 0 || b->ng == 1, .loss = {CT_LOSS_CROSS_ENTROPY, 0, -1, 0}, .opt = opt,
                      .amp = amp != CT_F32, .amp_dtype = amp, .channels_last = a->channels_last,
                      .verify = PIPELINE_VERIFY};
        const char *units[8];
        if (a->grad_ckpt && (p.remat.nunits = model_ckpt_units(m, units, 8, err)) < 0)
            return -1;
        p.remat.units = units;
        p.remat.budget = a->budget;
        p.remat.cheap = p.training && !a->keep_acts;
        PipelineResult r;
        if (pipeline_run(&p, g, &r, err))
            return -1;
        b->ts[k] = r.ts;
    }
    MemPlan plan;
    Graph *big = &b->g[b->ng - 1];
    if (plan_memory(big, &plan, err))
        return -1;
    *need = (double)plan_peak_bytes(&plan);
    plan_free(&plan);
    if (*need > memory_available(a->device))
        return 1;
    for (int k = 0; k < b->ng; k++) {
        state_create(&b->st[k], &b->g[k]);
        state_init(&b->st[k], 0);
        if (pre->source != PRETRAINED_NONE && pretrained_load(pre, &b->st[k], classes, err))
            return -1;
        for (int i = 0; k == 0 && i < pre->nlog; i++)
            printf("%s\n", pre->log[i]);
    }
    return 0;
}

/* Fills graph k's inputs: a random batch, random targets, lr 1e-4, scale 1. */
typedef struct Inputs {
    CtTensor t[4];
    float lr, scale;
    int n;
} Inputs;

static void inputs_make(const Graph *g, int classes, Inputs *in)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    in->lr = 1e-4f;
    in->scale = 1;
    in->n = 0;
    for (ValueId v = 0; v < g->nvalues && in->n < 4; v++) {
        const Value *val = &g->values[v];
        if (val->role != CT_ROLE_INPUT)
            continue;
        CtTensor *t = &in->t[in->n++];
        if (val->type.shape.ndim == 0) { /* the step's "lr" and "loss_scale" */
            *t = (CtTensor){val->type, val->name && !strcmp(val->name, "lr") ? &in->lr : &in->scale};
            continue;
        }
        tensor_alloc(t, val->type);
        int64_t n = shape_numel(&val->type.shape);
        for (int64_t i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            if (val->type.dtype == CT_I64)
                ((int64_t *)t->data)[i] = (int64_t)(s % (uint64_t)classes);
            else
                ((float *)t->data)[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
        }
    }
}

static void inputs_free(Inputs *in)
{
    for (int k = 0; k < in->n; k++)
        if (in->t[k].type.shape.ndim)
            tensor_free(&in->t[k]);
}

static int run_once(Bench *b, int k, Inputs *in, CtErr *err)
{
    CtTensor *out = calloc((size_t)b->g[k].noutputs, sizeof *out);
    CT_ASSERT(out != NULL);
    int rc = cli_step(&b->run[k], in[k].t, in[k].n, out, err);
    for (int o = 0; !rc && o < b->g[k].noutputs; o++)
        tensor_free(&out[o]);
    free(out);
    return rc;
}

/* One InferenceBenchmarkRunner / TrainBenchmarkRunner run. 1: out of memory. */
static int bench_run(const Args *a, Pretrained *pre, const CtBackend *be, int train, int batch, int img,
                     CtDType amp, Row *row, CtErr *err)
{
    const ModelEntry *m = &pre->m;
    Bench b;
    double need = 0, t_build = cli_now();
    peak_rss_reset();
    int rc = bench_build(a, pre, train, batch, img, amp, &b, &need, err);
    if (rc) {
        if (rc > 0)
            ct_fail(err, "out of memory: the plan needs %.0f MiB at batch %d, %.0f MiB are available", need / 1048576,
                    batch, memory_available(a->device) / 1048576);
        bench_free(&b);
        return rc;
    }
    for (int k = 0; k < b.ng; k++)
        if ((rc = cli_open(&b.run[k], be, &b.g[k], &b.st[k], err))) {
            bench_free(&b);
            return rc;
        }
    int classes = a->num_classes > 0 ? a->num_classes : m->cfg.num_classes;
    Inputs in[3];
    for (int k = 0; k < b.ng; k++)
        inputs_make(&b.g[k], classes, &in[k]);
    char threads[32] = "";
    if (be->host_threads)
        snprintf(threads, sizeof threads, ", %d threads", be->host_threads());
    printf("Built the %s graph%s in %.2fs (outside the timed region); backend %s%s\n", train ? "train" : "inference",
           b.ng > 1 ? "s" : "", cli_now() - t_build, be->name, threads);
    const char *note = be->note ? be->note(b.run[0].exec) : NULL;
    if (note)
        printf("%s\n", note);
    printf("Running %s benchmark on %s for %d steps w/ input size (%d, %d, %d) and batch size %d.\n",
           train ? "train" : "inference", m->name, a->iters, a->in_chans, img, img, batch);
    double *times = calloc((size_t)a->iters * 3 + 1, sizeof *times);
    CT_ASSERT(times != NULL);
    rc = -1;
    for (int i = 0; i < a->warm; i++)
        for (int k = 0; k < b.ng; k++)
            if (run_once(&b, k, in, err))
                goto done;
    double total[3] = {0}, t_run = cli_now();
    int log_freq = a->iters / 5 > 0 ? a->iters / 5 : 1;
    for (int i = 0; i < a->iters; i++) {
        for (int k = 0; k < b.ng; k++) {
            double t0 = cli_now();
            if (run_once(&b, k, in, err))
                goto done;
            times[(size_t)i * 3 + (size_t)k] = cli_now() - t0;
            total[k] += times[(size_t)i * 3 + (size_t)k];
        }
        if ((i + 1) % log_freq == 0)
            printf("%s [%d/%d]. %.2f samples/sec. %.3f ms/step.\n", train ? "Train" : "Infer", i + 1, a->iters,
                   (double)(i + 1) * batch / total[b.ng - 1], 1000 * total[b.ng - 1] / (i + 1));
    }
    double elapsed = cli_now() - t_run;
    /* --detail: the full step's own runs are timed apart; their phases are
     * forward, (forward+backward) - forward, step - (forward+backward) */
    if (b.ng == 3)
        elapsed = total[2];
    double *last = malloc(sizeof *last * (size_t)a->iters);
    CT_ASSERT(last != NULL);
    for (int i = 0; i < a->iters; i++)
        last[i] = times[(size_t)i * 3 + (size_t)(b.ng - 1)];
    qsort(last, (size_t)a->iters, sizeof *last, cmp_double);
    double median = a->iters % 2 ? last[a->iters / 2] : (last[a->iters / 2 - 1] + last[a->iters / 2]) / 2;
    free(last);
    static const char *const keys[2][7] = {
        {"infer_samples_per_sec", "infer_step_time", "infer_fwd_time", "infer_bwd_time", "infer_opt_time",
         "infer_batch_size", "infer_img_size"},
        {"train_samples_per_sec", "train_step_time", "train_fwd_time", "train_bwd_time", "train_opt_time",
         "train_batch_size", "train_img_size"}};
    double vals[] = {round_to(a->iters * (double)batch / elapsed, 2), round_to(1000 * total[b.ng - 1] / a->iters, 3),
                     round_to(1000 * total[0] / a->iters, 3), round_to(1000 * (total[1] - total[0]) / a->iters, 3),
                     round_to(1000 * (total[2] - total[1]) / a->iters, 3), batch, img};
    for (int q = 0; q < 7; q++)
        if (q < 2 || q > 4 || b.ng == 3)
            put(row, keys[train][q], vals[q], q >= 5);
    printf("%s benchmark of %s done. %.2f samples/sec, %.2f ms/step (median %.2f ms)\n",
           train ? "Train" : "Inference", m->name, vals[0], vals[1], 1000 * median);
    const double mib = 1024.0 * 1024.0;
    row->planned[train] = need / mib;
    row->rss[train] = strcmp(be->name, "cuda") ? peak_rss() / mib : -1;
    row->dev[train] = be->device_bytes ? (double)be->device_bytes(b.run[b.ng - 1].exec) / mib : -1;
    printf("Memory: %.1f MiB planned peak", need / mib);
    if (row->rss[train] >= 0)
        printf(", %.1f MiB measured peak (resident)", row->rss[train]);
    if (row->dev[train] >= 0)
        printf(", %.1f MiB allocated on the device", row->dev[train]);
    printf("\n");
    rc = 0;
done:
    free(times);
    for (int k = 0; k < b.ng; k++)
        inputs_free(&in[k]);
    bench_free(&b);
    return rc;
}

/* gmacs/macts per image of the eval graph at img, and the parameter count. */
static int model_stats(const Args *a, const ModelEntry *m, int img, GraphStats *gs, CtErr *err)
{
    Graph g;
    ModelSpec spec = {.batch_size = 1, .training = 0,
                      .args = {.num_classes = a->num_classes > 0 ? a->num_classes : m->cfg.num_classes,
                               .img_size = img, .in_chans = a->in_chans, .opt = a->kw.opt}};
    if (model_build(m, &spec, &g, err))
        return -1;
    StatsOptions so = {.count_attention = 1};
    int rc = graph_stats(&g, &so, gs, err);
    graph_free(&g);
    return rc;
}

/* benchmark() of benchmark.py for one model: the rows' columns in its order. */
static void benchmark(const Args *a, const char *name, const CtBackend *be, CtDType amp, Row *row)
{
    memset(row, 0, sizeof *row);
    snprintf(row->model, sizeof row->model, "%s", name);
    CtErr err = {{0}};
    const ModelEntry *m = model_find(name);
    if (!m) {
        snprintf(row->error, sizeof row->error, "unknown model '%s' (ctimm-compile --list-models lists them)", name);
        return;
    }
    Pretrained pre;
    if (pretrained_resolve(&pre, m, name, a->pretrained ? PRETRAINED_HUB : PRETRAINED_NONE, NULL, &err)) {
        snprintf(row->error, sizeof row->error, "%s", err.msg);
        return;
    }
    m = &pre.m;
    /* benchmark.py's resolve_data_config(use_test_size=not use_train_size) */
    int test = !a->use_train_size && m->cfg.test_input_size > 0;
    int img = a->n_input ? (int)a->input_size[1] : a->img_size > 0 ? a->img_size
              : test ? m->cfg.test_input_size : m->cfg.input_size[1];
    GraphStats gs;
    if (model_kwargs_check(m, &a->kw, img, &err) || model_stats(a, m, img, &gs, &err)) {
        snprintf(row->error, sizeof row->error, "%s", err.msg);
        return;
    }
    printf("Model %s created, param count: %lld\n", name, (long long)gs.params);
    int profile = !strncmp(a->bench, "profile", 7);
    int modes[2] = {0, 1}, nmodes = !strcmp(a->bench, "both") ? 2 : 1;
    if (!strcmp(a->bench, "train"))
        modes[0] = 1;
    for (int q = 0; q < nmodes && !profile; q++) {
        int batch = a->batch_size;
        for (;;) {
            int rc = bench_run(a, &pre, be, modes[q], batch, img, amp, row, &err);
            if (rc == 0)
                break;
            fprintf(stderr, "%s: \"%s\" while running benchmark.\n", prog, err.msg);
            if (rc < 0 || a->no_retry || !(batch = decay_batch(batch))) {
                snprintf(row->error, sizeof row->error, "%s", err.msg);
                return;
            }
            printf("Reducing batch size to %d for retry.\n", batch);
        }
        if (modes[q] == 0) {
            put(row, "infer_gmacs", round_to((double)gs.macs / 1e9, 2), 0);
            put(row, "infer_macts", round_to((double)gs.activations / 1e6, 2), 0);
        }
    }
    if (profile) {
        put(row, "infer_gmacs", round_to((double)gs.macs / 1e9, 2), 0);
        put(row, "infer_macts", round_to((double)gs.activations / 1e6, 2), 0);
        put(row, "infer_batch_size", 1, 1);
        put(row, "infer_img_size", img, 1);
    }
    put(row, "param_count", round_to((double)gs.params / 1e6, 2), 0);
    static const char *const mem_keys[2][3] = {
        {"infer_peak_planned_mib", "infer_peak_rss_mib", "infer_peak_device_mib"},
        {"train_peak_planned_mib", "train_peak_rss_mib", "train_peak_device_mib"}};
    for (int q = 0; q < nmodes && !profile; q++) {
        put(row, mem_keys[modes[q]][0], round_to(row->planned[modes[q]], 1), 0);
        if (row->rss[modes[q]] >= 0)
            put(row, mem_keys[modes[q]][1], round_to(row->rss[modes[q]], 1), 0);
        if (row->dev[modes[q]] >= 0)
            put(row, mem_keys[modes[q]][2], round_to(row->dev[modes[q]], 1), 0);
    }
}

static cJSON *row_json(const Row *r)
{
    cJSON *o = cJSON_CreateObject();
    CT_ASSERT(o != NULL);
    cJSON_AddStringToObject(o, "model", r->model);
    for (int k = 0; k < r->n; k++)
        cJSON_AddNumberToObject(o, r->keys[k], r->vals[k]);
    return o;
}

static int write_results(const char *path, const char *format, const Row *rows, int n, int list, CtErr *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ct_fail(err, "--results-file %s: %s", path, strerror(errno));
    if (!strcmp(format, "json")) {
        cJSON *j = list ? cJSON_CreateArray() : row_json(&rows[0]);
        for (int i = 0; list && i < n; i++)
            cJSON_AddItemToArray(j, row_json(&rows[i]));
        char *s = cJSON_Print(j);
        fprintf(f, "%s", s);
        free(s);
        cJSON_Delete(j);
    } else if (n > 0) { /* csv.DictWriter: the first row's keys, \r\n line ends */
        fprintf(f, "model");
        for (int k = 0; k < rows[0].n; k++)
            fprintf(f, ",%s", rows[0].keys[k]);
        fprintf(f, "\r\n");
        for (int i = 0; i < n; i++) {
            fprintf(f, "%s", rows[i].model);
            for (int k = 0; k < rows[i].n; k++) {
                char buf[40];
                if (rows[i].ints[k]) /* batch and image size: Python ints */
                    snprintf(buf, sizeof buf, "%.0f", rows[i].vals[k]);
                else
                    cli_py_repr(buf, sizeof buf, rows[i].vals[k], 0);
                fprintf(f, ",%s", buf);
            }
            fprintf(f, "\r\n");
        }
    }
    if (fclose(f))
        return ct_fail(err, "--results-file %s: %s", path, strerror(errno));
    return 0;
}

static double sort_value(const Row *r, const char *key)
{
    for (int k = 0; k < r->n; k++)
        if (!strcmp(r->keys[k], key))
            return r->vals[k];
    return -INFINITY;
}

static const char *sort_key_g;

static int by_key(const void *a, const void *b)
{
    double x = sort_value(a, sort_key_g), y = sort_value(b, sort_key_g);
    return (x < y) - (x > y);
}

static int parse_args(int argc, char **argv, Args *a)
{
    enum { O_LIST = 1000, O_BENCH, O_DETAIL, O_NORETRY, O_RFILE, O_RFMT, O_WARM, O_ITERS, O_DEVICE, O_IMG, O_INPUT,
           O_NC, O_CL, O_AMP, O_AMP_DTYPE, O_PREC, O_OPT, O_EPS, O_BETAS, O_DROP, O_DROP_PATH, O_MOM, O_WD,
           O_CLIP, O_CLIP_MODE, O_SMOOTH, O_PRETRAINED, O_IN_CHANS, O_GP, O_KWARGS, O_TRAIN_SIZE, O_CKPT, O_BUDGET, O_KEEP };
    static const struct option longs[] = {
        {"model", 1, 0, 'm'}, {"model-list", 1, 0, O_LIST}, {"bench", 1, 0, O_BENCH}, {"detail", 0, 0, O_DETAIL},
        {"no-retry", 0, 0, O_NORETRY}, {"results-file", 1, 0, O_RFILE}, {"results-format", 1, 0, O_RFMT},
        {"num-warm-iter", 1, 0, O_WARM}, {"num-bench-iter", 1, 0, O_ITERS}, {"device", 1, 0, O_DEVICE},
        {"batch-size", 1, 0, 'b'}, {"img-size", 1, 0, O_IMG}, {"input-size", 1, 0, O_INPUT},
        {"num-classes", 1, 0, O_NC}, {"channels-last", 0, 0, O_CL}, {"amp", 0, 0, O_AMP},
        {"grad-checkpointing", 0, 0, O_CKPT}, {"memory-budget", 1, 0, O_BUDGET},
        {"keep-activations", 0, 0, O_KEEP},
        {"amp-dtype", 1, 0, O_AMP_DTYPE}, {"precision", 1, 0, O_PREC}, {"opt", 1, 0, O_OPT},
        {"opt-eps", 1, 0, O_EPS}, {"opt-betas", 1, 0, O_BETAS}, {"drop", 1, 0, O_DROP},
        {"drop-path", 1, 0, O_DROP_PATH}, {"momentum", 1, 0, O_MOM}, {"weight-decay", 1, 0, O_WD},
        {"clip-grad", 1, 0, O_CLIP}, {"clip-mode", 1, 0, O_CLIP_MODE}, {"smoothing", 1, 0, O_SMOOTH},
        {"pretrained", 0, 0, O_PRETRAINED}, {"in-chans", 1, 0, O_IN_CHANS}, {"gp", 1, 0, O_GP},
        {"model-kwargs", 1, 0, O_KWARGS}, {"use-train-size", 0, 0, O_TRAIN_SIZE}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *a = (Args){.model = "resnet50", .bench = "both", .precision = "float32", .amp_dtype = "float16",
                .results_format = "csv", .device = "cpu", .opt = "sgd", .batch_size = 256, .num_classes = -1,
                .warm = 10, .iters = 40, .opt_eps = -1, .drop_path = -1 /* benchmark.py's None: the model's */};
    for (int i = 1; i < argc; i++)
        for (int k = 0; refused[k]; k++) {
            size_t n = strlen(refused[k]);
            if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, refused[k], n) &&
                (!argv[i][2 + n] || argv[i][2 + n] == '=')) {
                fprintf(stderr, "%s: --%s (benchmark.py's flag) is not implemented in ctimm-bench\n", prog,
                        refused[k]);
                return -1;
            }
        }
    opterr = 0;
    int c, bad = 0;
    double unused;
    while (!bad && (c = getopt_long(argc, argv, ":m:b:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case O_LIST: a->model_list = optarg; break;
        case O_BENCH: a->bench = optarg; break;
        case O_DETAIL: a->detail = 1; break;
        case O_NORETRY: a->no_retry = 1; break;
        case O_RFILE: a->results_file = optarg; break;
        case O_RFMT: a->results_format = optarg; break;
        case O_WARM: bad = cli_int(prog, "--num-warm-iter", optarg, 0, 1 << 20, &a->warm); break;
        case O_ITERS: bad = cli_int(prog, "--num-bench-iter", optarg, 1, 1 << 20, &a->iters); break;
        case O_DEVICE: a->device = optarg; break;
        case 'b': bad = cli_int(prog, "--batch-size", optarg, 1, 1 << 16, &a->batch_size); break;
        case O_IMG: bad = cli_int(prog, "--img-size", optarg, 8, 4096, &a->img_size); break;
        case O_INPUT: bad = cli_number_list(prog, "input-size", optarg, argc, argv, a->input_size, 3, &a->n_input); break;
        case O_NC: bad = cli_int(prog, "--num-classes", optarg, 1, 1 << 20, &a->num_classes); break;
        case O_CL: a->channels_last = 1; break;
        case O_CKPT: a->grad_ckpt = 1; break;
        case O_KEEP: a->keep_acts = 1; break;
        case O_BUDGET:
            if (cli_bytes(prog, "memory-budget", optarg, &a->budget))
                return -1;
            break;
        case O_AMP: a->amp = 1; break;
        case O_AMP_DTYPE: a->amp_dtype = optarg; break;
        case O_PREC: a->precision = optarg; break;
        case O_OPT: a->opt = optarg; break;
        case O_EPS: bad = cli_double(prog, "opt-eps", optarg, &a->opt_eps); break;
        case O_BETAS: bad = cli_number_list(prog, "opt-betas", optarg, argc, argv, a->opt_betas, 2, &a->n_betas); break;
        case O_DROP: bad = cli_double(prog, "drop", optarg, &a->drop); break;
        case O_DROP_PATH: bad = cli_double(prog, "drop-path", optarg, &a->drop_path); break;
        /* parsed as benchmark.py parses them, and like it not passed to the optimizer or the loss */
        case O_MOM: case O_WD: case O_CLIP: case O_SMOOTH: bad = cli_double(prog, "value", optarg, &unused); break;
        case O_CLIP_MODE: break;
        case O_PRETRAINED: a->pretrained = 1; break;
        case O_TRAIN_SIZE: a->use_train_size = 1; break;
        case O_IN_CHANS: bad = cli_int(prog, "--in-chans", optarg, 1, 4096, &a->in_chans); break;
        case O_GP: a->gp = optarg; break;
        case O_KWARGS: bad = cli_model_kwargs(prog, optarg, argc, argv, a->model_kwargs, &a->n_model_kwargs); break;
        case 'h': fputs(usage, stdout); return 1;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return -1;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return -1;
        }
    }
    if (bad || cli_model_options(prog, a->gp, a->model_kwargs, a->n_model_kwargs, benchmark_py_model_kwargs,
                                 "benchmark.py", &a->kw))
        return -1;
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    Args a;
    cli_init_signals(prog);
    int parsed = parse_args(argc, argv, &a);
    if (parsed)
        return parsed > 0 ? 0 : 2;
    static const char *const benches[] = {"inference", "train", "both", "profile", "profile_fvcore", NULL};
    int known = 0;
    for (int k = 0; benches[k]; k++)
        known |= !strcmp(a.bench, benches[k]);
    if (!known) {
        fprintf(stderr, "%s: --bench %s is not one of inference, train, both, profile\n", prog, a.bench);
        return 2;
    }
    if (strcmp(a.results_format, "csv") && strcmp(a.results_format, "json")) {
        fprintf(stderr, "%s: --results-format %s is not one of csv, json\n", prog, a.results_format);
        return 2;
    }
    if (a.n_input && (a.n_input != 3 || a.input_size[1] != a.input_size[2] || !(a.input_size[0] >= 1) ||
                      (a.in_chans && a.input_size[0] != a.in_chans))) {
        fprintf(stderr, "%s: --input-size takes C H W with H == W (square inputs only), C --in-chans' count\n", prog);
        return 2;
    }
    if (!a.in_chans) /* benchmark.py's model has 3; --input-size's count makes ctimm's */
        a.in_chans = a.n_input ? (int)a.input_size[0] : 3;
    if (a.amp) /* benchmark.py: --amp overrides --precision */
        a.precision = !strcmp(a.amp_dtype, "float16") ? "amp" : !strcmp(a.amp_dtype, "bfloat16") ? "amp_bfloat16" : "?";
    CtDType amp = !strcmp(a.precision, "float32") ? CT_F32 : !strcmp(a.precision, "amp") ? CT_F16
                : !strcmp(a.precision, "amp_bfloat16") ? CT_BF16 : (CtDType)-1;
    if ((int)amp < 0) {
        fprintf(stderr, "%s: --precision %s is not one of float32, amp, amp_bfloat16 (--amp-dtype float16|bfloat16; "
                "pure float16/bfloat16 models are not implemented)\n", prog, a.amp ? a.amp_dtype : a.precision);
        return 2;
    }
    CtErr err = {{0}};
    if (!strcmp(a.device, "cuda")) { /* a benchmark must not quietly measure another device */
        char why[512];
        if (!cuda_backend_usable(why, sizeof why)) {
            fprintf(stderr, "%s: --device cuda: %s\n", prog, why);
            return 2;
        }
        /* benchmark.py allows TF32; the timed steps' outputs are not read,
         * and their batch, as benchmark.py's, is made once and stays on the device */
        cli_program_options()->allow_tf32 = 1;
        cli_program_options()->outputs_on_device = 1;
        cli_program_options()->inputs_fixed = 1;
    }
    const CtBackend *be = cli_backend(prog, a.device, &err);
    if (!be) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    int n = 1;
    char **names = NULL;
    if (a.model_list && !(names = cli_read_lines("--model-list", a.model_list, &n, &err))) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (!names && !cli_model(prog, a.model))
        return 2;
    printf("Benchmarking in %s precision. %s layout. backend %s\n", a.precision, a.channels_last ? "NHWC" : "NCHW",
           be->name);
    Row *rows = calloc((size_t)n, sizeof *rows);
    CT_ASSERT(rows != NULL);
    int ok = 0, failed = 0;
    cli_catch_interrupts();
    for (int i = 0; i < n; i++) {
        benchmark(&a, names ? names[i] : a.model, be, amp, &rows[ok]);
        if (rows[ok].error[0] && cli_interrupted()) { /* no results from a part of the list */
            if (names)
                cli_free_lines(names, n);
            free(rows);
            return 130;
        }
        if (rows[ok].error[0]) {
            fprintf(stderr, "%s: %s: %s; skipping it\n", prog, rows[ok].model, rows[ok].error);
            failed++;
            continue;
        }
        ok++;
    }
    if (names) { /* benchmark.py sorts a list by the bench's throughput */
        sort_key_g = !strcmp(a.bench, "train") ? "train_samples_per_sec"
                   : !strncmp(a.bench, "profile", 7) ? "infer_gmacs" : "infer_samples_per_sec";
        qsort(rows, (size_t)ok, sizeof *rows, by_key);
    }
    int rc = failed && (!names || !ok) ? 1 : 0;
    if (ok) {
        cJSON *j = names ? cJSON_CreateArray() : row_json(&rows[0]);
        for (int i = 0; names && i < ok; i++)
            cJSON_AddItemToArray(j, row_json(&rows[i]));
        char *s = cJSON_Print(j);
        printf("--result\n%s\n", s);
        free(s);
        cJSON_Delete(j);
        if (a.results_file && write_results(a.results_file, a.results_format, rows, ok, names != NULL, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            rc = 1;
        }
    }
    if (names)
        cli_free_lines(names, n);
    free(rows);
    return rc;
}
