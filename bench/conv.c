/*
 * bench_conv: the cpu backend's convolutions against oneDNN's (the library
 * PyTorch runs its CPU convolutions through), shape by shape, for one
 * model's training step: every conv2d, conv2d_grad_input and
 * conv2d_grad_weight node of the graph ctimm-train would run, grouped by
 * geometry and weighted by how often the step runs it. Built only where
 * oneDNN's headers are (Debian's libdnnl-dev); never run as a test. The
 * measurement behind issue 26's choice of what to hand to oneDNN.
 *
 * Columns, ms per step (the sum over the step's nodes of that kind):
 *   ctimm     runtime/cpu's kernels (im2col + BLAS, Winograd, depthwise)
 *   plain     oneDNN on the same NCHW / OIHW buffers (what a drop-in call gets)
 *   blocked   oneDNN in the layouts it picks (format "any"), the convolution
 *             alone: what activations kept in its blocked layout would get
 *   reorders  converting each operand between NCHW and those layouts once
 * and each shape's relative difference ||ctimm - oneDNN|| / ||ctimm|| (plain).
 *
 *   bench_conv --model resnet50 [--batch-size 8] [--img-size 224] [--iters 5] [--detail]
 * Threads: OMP_NUM_THREADS (one OpenMP pool: ctimm, OpenBLAS and oneDNN).
 */
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/cache.h"
#include "models/registry.h"
#include "passes/pipeline.h"
#include "runtime/cpu/cpu.h"

#define DN(call)                                                                                                       \
    do {                                                                                                               \
        dnnl_status_t st_ = (call);                                                                                    \
        if (st_ != dnnl_success) {                                                                                     \
            fprintf(stderr, "bench_conv: %s failed (%d) at %s:%d\n", #call, (int)st_, __FILE__, __LINE__);           \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

enum { K_FWD, K_DATA, K_WEIGHTS, NKINDS };
static const char *const kind_name[NKINDS] = {"forward", "grad_input", "grad_weight"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One distinct convolution of the step: kind, the node that has it, how often. */
typedef struct Conv {
    int kind, node, count;
    int64_t x[4], w[4], y[4], a[7]; /* a: stride h w, pad h w, dilation h w, groups */
} Conv;

static void conv_of(const Graph *g, const Node *n, int kind, Conv *c)
{
    /* forward: x, w -> y; grad_input: dy, w -> dx; grad_weight: x, dy -> dw */
    const CtShape *x = kind == K_DATA ? &g->values[n->out[0]].type.shape : &g->values[n->in[0]].type.shape;
    const CtShape *w = kind == K_WEIGHTS ? &g->values[n->out[0]].type.shape : &g->values[n->in[1]].type.shape;
    const CtShape *y = kind == K_FWD    ? &g->values[n->out[0]].type.shape
                       : kind == K_DATA ? &g->values[n->in[0]].type.shape
                                        : &g->values[n->in[1]].type.shape;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    for (int d = 0; d < 4; d++) {
        c->x[d] = x->d[d];
        c->w[d] = w->d[d];
        c->y[d] = y->d[d];
    }
    for (int k = 0; k < 7; k++)
        c->a[k] = n->iattr[k];
}

static float *randn(int64_t n, unsigned *seed)
{
    float *p = malloc(sizeof *p * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = ((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

static int64_t numel4(const int64_t *d) { return d[0] * d[1] * d[2] * d[3]; }

/* oneDNN's view of c: its descriptors in `tag` (plain: nchw / (g)oihw). */
typedef struct Dn {
    dnnl_primitive_desc_t pd, fwd_pd;
    dnnl_primitive_t prim;
} Dn;

static void md_act(dnnl_memory_desc_t *md, const int64_t *d, int any)
{
    dnnl_dims_t dims = {d[0], d[1], d[2], d[3]};
    DN(dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32, any ? dnnl_format_tag_any : dnnl_nchw));
}

static void md_w(dnnl_memory_desc_t *md, const Conv *c, int any)
{
    int64_t g = c->a[6];
    if (g == 1) {
        md_act(md, c->w, any);
        return;
    }
    dnnl_dims_t dims = {g, c->w[0] / g, c->w[1], c->w[2], c->w[3]};
    DN(dnnl_memory_desc_init_by_tag(md, 5, dims, dnnl_f32, any ? dnnl_format_tag_any : dnnl_goihw));
}

static void dn_create(dnnl_engine_t eng, const Conv *c, int any, Dn *dn)
{
    dnnl_memory_desc_t x, w, y;
    md_act(&x, c->x, any);
    md_w(&w, c, any);
    md_act(&y, c->y, any);
    dnnl_dims_t s = {c->a[0], c->a[1]}, p = {c->a[2], c->a[3]}, dl = {c->a[4] - 1, c->a[5] - 1};
    dnnl_dims_t pr = {(c->y[2] - 1) * c->a[0] + (c->w[2] - 1) * c->a[4] + 1 - c->x[2] - c->a[2],
                      (c->y[3] - 1) * c->a[1] + (c->w[3] - 1) * c->a[5] + 1 - c->x[3] - c->a[3]};
    dnnl_convolution_desc_t fd, bd;
    DN(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &x, &w, NULL,
                                                  &y, s, dl, p, pr));
    DN(dnnl_primitive_desc_create(&dn->fwd_pd, &fd, NULL, eng, NULL));
    if (c->kind == K_FWD) {
        dn->pd = dn->fwd_pd;
        dn->fwd_pd = NULL;
    } else {
        if (c->kind == K_DATA)
            DN(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &x, &w, &y, s, dl, p, pr));
        else
            DN(dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &x, &w, NULL, &y, s,
                                                                   dl, p, pr));
        DN(dnnl_primitive_desc_create(&dn->pd, &bd, NULL, eng, dn->fwd_pd));
    }
    DN(dnnl_primitive_create(&dn->prim, dn->pd));
}

static void dn_free(Dn *dn)
{
    dnnl_primitive_destroy(dn->prim);
    dnnl_primitive_desc_destroy(dn->pd);
    if (dn->fwd_pd)
        dnnl_primitive_desc_destroy(dn->fwd_pd);
}

/* The args of c's primitive: (src-like, weights-like, dst-like) in the
 * order forward x w y, grad_input dy w dx, grad_weight x dy dw. */
static void arg_ids(int kind, int ids[3])
{
    static const int t[NKINDS][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                     {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                                     {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
    memcpy(ids, t[kind], sizeof t[kind]);
}

static dnnl_query_t md_query(int arg)
{
    switch (arg) {
    case DNNL_ARG_SRC: return dnnl_query_src_md;
    case DNNL_ARG_WEIGHTS: return dnnl_query_weights_md;
    case DNNL_ARG_DST: return dnnl_query_dst_md;
    case DNNL_ARG_DIFF_DST: return dnnl_query_diff_dst_md;
    case DNNL_ARG_DIFF_SRC: return dnnl_query_diff_src_md;
    default: return dnnl_query_diff_weights_md;
    }
}

/* Seconds per run of `prim` (the best of iters) with args; the scratchpad too. */
static double time_prim(dnnl_engine_t eng, dnnl_stream_t st, dnnl_primitive_t prim, const_dnnl_primitive_desc_t pd,
                        dnnl_exec_arg_t *args, int nargs, int iters)
{
    dnnl_memory_t scratch = NULL;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd)) {
        DN(dnnl_memory_create(&scratch, smd, eng, DNNL_MEMORY_ALLOCATE));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch};
    }
    double best = 1e30;
    for (int i = 0; i < iters + 1; i++) {
        double t0 = now();
        DN(dnnl_primitive_execute(prim, st, nargs, args));
        DN(dnnl_stream_wait(st));
        double t = now() - t0;
        if (i && t < best)
            best = t;
    }
    if (scratch)
        dnnl_memory_destroy(scratch);
    return best;
}

typedef struct Times {
    double ctimm, plain, blocked, reorders, rel;
} Times;

static void run_conv(dnnl_engine_t eng, dnnl_stream_t st, const Graph *g, const Conv *c, int iters, Times *t)
{
    const Node *n = &g->nodes[c->node];
    unsigned seed = 1234u + (unsigned)c->node;
    const int64_t *sh[3] = {c->kind == K_DATA ? c->y : c->x, c->kind == K_WEIGHTS ? c->y : c->w,
                            c->kind == K_FWD ? c->y : c->kind == K_DATA ? c->x : c->w};
    float *buf[3], *mine;
    for (int k = 0; k < 2; k++)
        buf[k] = randn(numel4(sh[k]), &seed);
    buf[2] = calloc((size_t)numel4(sh[2]), sizeof(float));
    mine = calloc((size_t)numel4(sh[2]), sizeof(float));

    float *in[3] = {buf[0], buf[1], NULL}, *out[1] = {mine};
    Node plain = *n; /* without its bias: oneDNN runs none here either */
    plain.nin = 2;
    void (*fn)(const Graph *, const Node *, float *const *, float *const *) =
        c->kind == K_FWD ? cpu_conv2d : c->kind == K_DATA ? cpu_conv2d_grad_input : cpu_conv2d_grad_weight;
    t->ctimm = 1e30;
    for (int i = 0; i < iters + 1; i++) {
        double t0 = now();
        fn(g, &plain, in, out);
        double dt = now() - t0;
        if (i && dt < t->ctimm)
            t->ctimm = dt;
    }

    int ids[3];
    arg_ids(c->kind, ids);
    for (int any = 0; any < 2; any++) {
        Dn dn;
        dn_create(eng, c, any, &dn);
        dnnl_memory_t user[3], mem[3];
        dnnl_exec_arg_t args[4];
        double reorder = 0;
        for (int k = 0; k < 3; k++) {
            const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(dn.pd, md_query(ids[k]), 0);
            dnnl_memory_desc_t umd;
            if (k == 1 && c->kind != K_WEIGHTS)
                md_w(&umd, c, 0);
            else if (k == 2 && c->kind == K_WEIGHTS)
                md_w(&umd, c, 0);
            else
                md_act(&umd, sh[k], 0);
            DN(dnnl_memory_create(&user[k], &umd, eng, buf[k]));
            if (!any) {
                mem[k] = user[k];
            } else {
                DN(dnnl_memory_create(&mem[k], md, eng, DNNL_MEMORY_ALLOCATE));
                dnnl_primitive_desc_t rpd;
                dnnl_primitive_t r;
                int to_blocked = k < 2;
                DN(dnnl_reorder_primitive_desc_create(&rpd, to_blocked ? &umd : md, eng, to_blocked ? md : &umd, eng,
                                                      NULL));
                DN(dnnl_primitive_create(&r, rpd));
                dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, to_blocked ? user[k] : mem[k]},
                                         {DNNL_ARG_TO, to_blocked ? mem[k] : user[k]}};
                reorder += time_prim(eng, st, r, rpd, ra, 2, iters);
                dnnl_primitive_destroy(r);
                dnnl_primitive_desc_destroy(rpd);
            }
            args[k] = (dnnl_exec_arg_t){ids[k], mem[k]};
        }
        double dt = time_prim(eng, st, dn.prim, dn.pd, args, 3, iters);
        if (!any) {
            t->plain = dt;
            double d2 = 0, n2 = 0;
            for (int64_t i = 0; i < numel4(sh[2]); i++) {
                d2 += ((double)buf[2][i] - mine[i]) * ((double)buf[2][i] - mine[i]);
                n2 += (double)mine[i] * mine[i];
            }
            t->rel = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
        } else {
            t->blocked = dt;
            t->reorders = reorder;
        }
        for (int k = 0; k < 3; k++) {
            if (any)
                dnnl_memory_destroy(mem[k]);
            dnnl_memory_destroy(user[k]);
        }
        dn_free(&dn);
    }
    for (int k = 0; k < 3; k++)
        free(buf[k]);
    free(mine);
}

static int same_conv(const Conv *a, const Conv *b)
{
    return a->kind == b->kind && !memcmp(a->x, b->x, sizeof a->x) && !memcmp(a->w, b->w, sizeof a->w) &&
           !memcmp(a->y, b->y, sizeof a->y) && !memcmp(a->a, b->a, sizeof a->a);
}

int main(int argc, char **argv)
{
    const char *model = "resnet50";
    int batch = 8, img = 0, iters = 5, detail = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--batch-size") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--img-size") && i + 1 < argc)
            img = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--detail"))
            detail = 1;
        else {
            fprintf(stderr, "usage: bench_conv --model NAME [--batch-size 8] [--img-size N] [--iters 5] [--detail]\n");
            return 2;
        }
    }
    const ModelEntry *m = model_find(model);
    if (!m) {
        fprintf(stderr, "bench_conv: no model '%s' (ctimm-compile --list-models)\n", model);
        return 2;
    }
    CtErr err = {{0}};
    ModelSpec spec = {.batch_size = batch, .training = 1, .args = model_args_default()};
    spec.args.img_size = img;
    Graph g;
    Pipeline p = {.training = 1, .loss = {CT_LOSS_CROSS_ENTROPY, 0, -1, 0}, .remat = {.cheap = 1}};
    if (optim_defaults("sgd", &p.opt)) {
        fprintf(stderr, "bench_conv: optimizer sgd is not implemented\n");
        return 1;
    }
    PipelineResult r;
    if (model_build(m, &spec, &g, &err) || pipeline_run(&p, &g, &r, &err)) {
        fprintf(stderr, "bench_conv: %s: %s\n", model, err.msg);
        return 1;
    }
    Conv *cv = calloc((size_t)g.nnodes + 1, sizeof *cv);
    int nc = 0;
    for (int i = 0; i < g.nnodes; i++) {
        int op = g.nodes[i].op,
            kind = op == CT_OP_conv2d ? K_FWD : op == CT_OP_conv2d_grad_input ? K_DATA
                                            : op == CT_OP_conv2d_grad_weight ? K_WEIGHTS : -1;
        if (kind < 0)
            continue;
        Conv c;
        conv_of(&g, &g.nodes[i], kind, &c);
        c.node = i;
        int j = 0;
        while (j < nc && !same_conv(&cv[j], &c))
            j++;
        if (j == nc)
            cv[nc++] = c;
        cv[j].count++;
    }
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    char cpu_model[256];
    host_cpu_model(cpu_model, sizeof cpu_model);
    const char *thr = getenv("OMP_NUM_THREADS");
    const dnnl_version_t *v = dnnl_version();
    printf("bench_conv: %s b%d train, %d distinct convolutions; CPU %s, OMP_NUM_THREADS=%s, oneDNN %d.%d.%d (%s)\n",
           model, batch, nc, cpu_model, thr ? thr : "unset", v->major, v->minor, v->patch, v->cpu_runtime == 2 ? "OpenMP" : "other");
    if (detail)
        printf("%-11s %5s %-22s %-16s %-8s %8s %8s %8s %8s %8s\n", "kind", "count", "x", "w", "s/p/g", "ctimm",
               "plain", "blocked", "reorder", "rel");
    Times tot[NKINDS] = {{0}};
    for (int j = 0; j < nc; j++) {
        Times t = {0};
        run_conv(eng, st, &g, &cv[j], iters, &t);
        Times *s = &tot[cv[j].kind];
        s->ctimm += t.ctimm * cv[j].count;
        s->plain += t.plain * cv[j].count;
        s->blocked += t.blocked * cv[j].count;
        s->reorders += t.reorders * cv[j].count;
        s->rel = t.rel > s->rel ? t.rel : s->rel;
        if (detail) {
            char xs[32], ws[32], a[16];
            snprintf(xs, sizeof xs, "%lldx%lldx%lldx%lld", (long long)cv[j].x[0], (long long)cv[j].x[1],
                     (long long)cv[j].x[2], (long long)cv[j].x[3]);
            snprintf(ws, sizeof ws, "%lldx%lldx%lldx%lld", (long long)cv[j].w[0], (long long)cv[j].w[1],
                     (long long)cv[j].w[2], (long long)cv[j].w[3]);
            snprintf(a, sizeof a, "%lld/%lld/%lld", (long long)cv[j].a[0], (long long)cv[j].a[2], (long long)cv[j].a[6]);
            printf("%-11s %5d %-22s %-16s %-8s %8.2f %8.2f %8.2f %8.2f %8.1e\n", kind_name[cv[j].kind], cv[j].count, xs,
                   ws, a, 1e3 * t.ctimm, 1e3 * t.plain, 1e3 * t.blocked, 1e3 * t.reorders, t.rel);
        }
    }
    printf("%-12s %10s %10s %10s %10s %9s %9s %9s\n", "ms/step", "ctimm", "plain", "blocked", "reorders",
           "plain/x", "blocked/x", "max rel");
    Times all = {0};
    for (int k = 0; k < NKINDS; k++) {
        printf("%-12s %10.1f %10.1f %10.1f %10.1f %8.2fx %8.2fx %9.1e\n", kind_name[k], 1e3 * tot[k].ctimm,
               1e3 * tot[k].plain, 1e3 * tot[k].blocked, 1e3 * tot[k].reorders,
               tot[k].plain > 0 ? tot[k].ctimm / tot[k].plain : 0, tot[k].blocked > 0 ? tot[k].ctimm / tot[k].blocked : 0,
               tot[k].rel);
        all.ctimm += tot[k].ctimm;
        all.plain += tot[k].plain;
        all.blocked += tot[k].blocked;
        all.reorders += tot[k].reorders;
    }
    printf("%-12s %10.1f %10.1f %10.1f %10.1f %8.2fx %8.2fx\n", "all", 1e3 * all.ctimm, 1e3 * all.plain,
           1e3 * all.blocked, 1e3 * all.reorders, all.ctimm / all.plain, all.ctimm / all.blocked);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    free(cv);
    train_step_free(&r.ts);
    graph_free(&g);
    return 0;
}
