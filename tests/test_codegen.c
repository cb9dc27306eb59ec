/* Codegen on the host: every elementwise op (an op fusion lowers that no
 * case covers fails), and fused chains of them, as kernel IR rendered to
 * host C, compiled with cc and run, against the ref backend within 1e-6
 * relative in f32 (the cpu backend's precision) and to the last bit in
 * KIR_EXACT (one scalar expression gives both); the graph's kernels are one
 * translation unit, found again in the cache without compiling (in memory,
 * then on disk), and a corrupted disk entry is recompiled exactly once and
 * still gives the right results. Works in a mkdtemp cache under /tmp. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "graph_nodes.h"
#include "codegen/host_compile.h"
#include "codegen/render.h"
#include "ir/formulas.h"
#include "runtime/backend.h"

#define TOL 1e-6    /* KIR_F32 */
#define TOL_EXACT 0 /* KIR_EXACT: the ref kernels' own expressions */

static HostCompiler hc;
static char cache_dir[300];
static int covered[CT_NOPS]; /* per op: some case compiled and ran it */

static ValueId input(Graph *g, const char *name, CtDType dt, int ndim, const int64_t *d)
{
    return graph_add_value(g, (CtType){shape_make(ndim, d), dt}, CT_ROLE_INPUT, name);
}

/* The inputs every case draws from: x [2,3,4,5] in (-4, 4), pos alike in
 * (0.1, 4.1), y [3,1,5] and ypos [3,1,5] for broadcasts, s a scalar,
 * step and late i64 scalars (3, and 100: past RAdam's warm-up). */
typedef struct Ins {
    ValueId x, pos, y, ypos, s, step, late;
} Ins;

static Ins add_inputs(Graph *g)
{
    const int64_t big[] = {2, 3, 4, 5}, small[] = {3, 1, 5};
    Ins in;
    in.x = input(g, "x", CT_F32, 4, big);
    in.pos = input(g, "pos", CT_F32, 4, big);
    in.y = input(g, "y", CT_F32, 3, small);
    in.ypos = input(g, "ypos", CT_F32, 3, small);
    in.s = input(g, "s", CT_F32, 0, NULL);
    in.step = input(g, "step", CT_I64, 0, NULL);
    in.late = input(g, "late", CT_I64, 0, NULL);
    return in;
}

static void fill_inputs(const Graph *g, CtTensor *t, int *n)
{
    uint32_t r = 12345;
    *n = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->role != CT_ROLE_INPUT)
            continue;
        tensor_alloc(&t[*n], val->type);
        int64_t cnt = shape_numel(&val->type.shape);
        for (int64_t i = 0; i < cnt; i++) {
            r = r * 1664525u + 1013904223u;
            double u = (r >> 8) / 16777216.0;
            if (val->type.dtype == CT_I64)
                ((int64_t *)t[*n].data)[i] = strcmp(val->name, "late") ? 3 : 100;
            else if (strstr(val->name, "pos") || !strcmp(val->name, "s"))
                ((float *)t[*n].data)[i] = (float)(0.1 + 4 * u);
            else
                ((float *)t[*n].data)[i] = (float)(8 * u - 4);
        }
        ++*n;
    }
}

/* ||a-b|| / ||b||; NaN where one has a NaN the other has not. */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i]))
            continue;
        double d = (double)a[i] - b[i];
        diff += d * d;
        norm += (double)b[i] * b[i];
    }
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

/* Every launch of the plan lowered with `opt`; their host C in *src. */
static int lower_all(const Graph *g, const FusePlan *p, KirOptions opt, KirKernel *ks, CtBuf *src)
{
    CtErr err;
    render_c_prelude(src);
    for (int launch = 0; launch < p->kernels_after; launch++) {
        if (kir_lower(g, p, launch, opt, &ks[launch], &err)) {
            CHECKF(0, "%s", err.msg);
            return -1;
        }
        render_c_kernel(&ks[launch], src);
    }
    return 0;
}

/* Memory for every value, the inputs copied in. */
static void alloc_values(const Graph *g, const CtTensor *in, void **mem)
{
    for (ValueId v = 0, k = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        size_t bytes = (size_t)shape_numel(&val->type.shape) * ct_dtype_size(val->type.dtype);
        mem[v] = calloc(bytes + 1, 1);
        if (val->role == CT_ROLE_INPUT)
            memcpy(mem[v], in[k++].data, bytes);
    }
}

/* Runs every launch of the compiled module on per-value memory; the graph
 * must be elementwise steps only. */
static void run_compiled(const Graph *g, const FusePlan *p, const KirKernel *ks, const HostModule *m, void **mem)
{
    for (int launch = 0; launch < p->kernels_after; launch++) {
        void *args[64];
        CT_ASSERT(ks[launch].nbufs <= 64);
        for (int b = 0; b < ks[launch].nbufs; b++)
            args[b] = mem[ks[launch].bufs[b].value];
        HostKernelFn fn = host_kernel(m, launch);
        CHECKF(fn != NULL, "no kernel ct_k%d", launch);
        if (fn)
            fn(args);
    }
}

/* Compiles g's kernels at precision prec through `cache`, runs them and
 * the ref backend, and compares every f32 output within tol; returns the
 * worst error (-1 on failure). */
static double check_graph(const char *what, const Graph *g, KirPrecision prec, double tol, KernelCache *cache)
{
    CtErr err;
    FusePlan p;
    CtBuf src = {0};
    HostModule m = {0};
    CtTensor in[8], *ref_out = calloc((size_t)g->noutputs, sizeof *ref_out);
    void **mem = calloc((size_t)g->nvalues, sizeof *mem);
    KirKernel *ks = NULL;
    int nin;
    double worst = -1;
    fill_inputs(g, in, &nin);
    if (fuse_plan(g, &p, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        goto free_inputs;
    }
    for (int s = 0; s < p.nsteps; s++)
        CHECKF(p.steps[s].kind == FUSE_ELEMENTWISE && !p.steps[s].view, "%s: step %d is not a kernel", what, s);
    for (int i = 0; i < g->nnodes; i++)
        covered[g->nodes[i].op] = 1;
    ks = calloc((size_t)p.kernels_after + 1, sizeof *ks);
    if (lower_all(g, &p, (KirOptions){prec, 0}, ks, &src) || host_compile(&hc, cache, src.s, &m, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        goto free_plan;
    }
    CtState st;
    state_create(&st, g);
    int rc = backend_run_once(&ct_backend_ref, g, &st, in, nin, ref_out, NULL, &err);
    state_free(&st);
    CHECKF(rc == 0, "%s: ref: %s", what, err.msg);
    if (rc == 0) {
        alloc_values(g, in, mem);
        run_compiled(g, &p, ks, &m, mem);
        worst = 0;
        for (int k = 0; k < g->noutputs; k++) {
            const CtType *t = &g->values[g->outputs[k]].type;
            double e = rel_err(mem[g->outputs[k]], ref_out[k].data, shape_numel(&t->shape));
            CHECKF(e <= tol, "%s (%s): output %d: rel err %.3e", what, prec == KIR_EXACT ? "exact" : "f32", k, e);
            worst = e > worst || isnan(e) ? e : worst;
            tensor_free(&ref_out[k]);
        }
    }
    host_module_close(&m);
free_plan:
    for (int l = 0; ks && l < p.kernels_after; l++)
        kir_free(&ks[l]);
    free(ks);
    buf_free(&src);
    fuse_free(&p);
free_inputs:
    for (int k = 0; k < nin; k++)
        tensor_free(&in[k]);
    for (ValueId v = 0; v < g->nvalues; v++)
        free(mem[v]);
    free(mem);
    free(ref_out);
    return worst;
}

/* One case: a graph on the common inputs whose outputs `build` marks. */
typedef void (*BuildFn)(Graph *g, const Ins *in, int variant);

static void check_case(const char *what, BuildFn build, int variant, KernelCache *cache)
{
    Graph g;
    graph_init(&g);
    Ins in = add_inputs(&g);
    build(&g, &in, variant);
    CtErr err;
    CHECKF(graph_verify(&g, &err) == 0, "%s: %s", what, err.msg);
    double e32 = check_graph(what, &g, KIR_F32, TOL, cache), ex = check_graph(what, &g, KIR_EXACT, TOL_EXACT, cache);
    printf("%-28s variant %2d: rel err %.2e in f32, %.2e exact\n", what, variant, e32, ex);
    graph_free(&g);
}

#define ACT_KIND(name) CT_OP_##name,
static const CtOp acts[] = {CT_ACTIVATIONS(ACT_KIND)};
enum { NACTS = sizeof acts / sizeof *acts };

/* variant 2k + a: activation k (a: gelu's tanh form). */
static void build_act(Graph *g, const Ins *in, int variant)
{
    CtOp op = acts[variant / 2];
    ValueId x = op == CT_OP_rsqrt || op == CT_OP_sqrt ? in->pos : in->x;
    graph_mark_output(g, test_node(g, op, 1, &x, (int64_t[]){variant & 1}, op == CT_OP_gelu, NULL, 0));
}

static void build_act_grad(Graph *g, const Ins *in, int variant)
{
    CtOp op = acts[variant / 2];
    ValueId x = op == CT_OP_rsqrt || op == CT_OP_sqrt ? in->pos : in->x;
    int64_t a[2] = {op, op == CT_OP_gelu ? variant & 1 : 0};
    graph_mark_output(g, test_node(g, CT_OP_act_grad, 2, (ValueId[]){x, in->pos}, a, 2, NULL, 0));
}

/* add, mul, div with broadcasts both ways, scale_shift, clamp, clip_coef,
 * expand, casts through f16 and bf16, clamp's gradient, a global pool's
 * gradient. */
static void build_misc(Graph *g, const Ins *in, int variant)
{
    ValueId y;
    switch (variant) {
    case 0: y = test_node(g, CT_OP_add, 2, (ValueId[]){in->x, in->y}, NULL, 0, NULL, 0); break;
    case 1: y = test_node(g, CT_OP_mul, 2, (ValueId[]){in->y, in->x}, NULL, 0, NULL, 0); break;
    case 2: y = test_node(g, CT_OP_div, 2, (ValueId[]){in->x, in->ypos}, NULL, 0, NULL, 0); break;
    case 3: y = test_node(g, CT_OP_div, 2, (ValueId[]){in->s, in->pos}, NULL, 0, NULL, 0); break;
    case 4: y = test_node(g, CT_OP_scale_shift, 1, &in->x, NULL, 0, (double[]){-0.75, 0.5}, 2); break;
    case 5: y = test_node(g, CT_OP_clamp, 1, &in->x, NULL, 0, (double[]){-1, 2.5}, 2); break;
    case 6: y = test_node(g, CT_OP_clip_coef, 1, &in->pos, NULL, 0, (double[]){1.5, 0, 1e-6, 0}, 4); break;
    case 7: {
        ValueId sq = test_node(g, CT_OP_mul, 2, (ValueId[]){in->x, in->x}, NULL, 0, NULL, 0);
        y = test_node(g, CT_OP_clip_coef, 2, (ValueId[]){in->pos, sq}, NULL, 0, (double[]){0.3, 1e-3, 0, 1e-6}, 4);
        break;
    }
    case 8: y = test_node(g, CT_OP_expand, 1, &in->y, (int64_t[]){4, 2, 3, 4, 5}, 5, NULL, 0); break;
    case 11: y = test_node(g, CT_OP_clamp_grad, 2, (ValueId[]){in->x, in->pos}, NULL, 0, (double[]){-1, 2.5}, 2); break;
    case 12: { /* a global pool's gradient, broadcast in the add that reads it */
        ValueId d = input(g, "dy", CT_F32, 4, (int64_t[]){2, 3, 1, 1});
        ValueId b = test_node(g, CT_OP_global_avg_pool2d_grad, 1, &d, (int64_t[]){4, 5}, 2, NULL, 0);
        y = test_node(g, CT_OP_add, 2, (ValueId[]){in->x, b}, NULL, 0, NULL, 0);
        break;
    }
    default: {
        ValueId h = test_node(g, CT_OP_cast, 1, &in->x, (int64_t[]){variant == 9 ? CT_F16 : CT_BF16}, 1, NULL, 0);
        ValueId t = test_node(g, CT_OP_scale_shift, 1, &h, NULL, 0, (double[]){3, 0.25}, 2);
        y = test_node(g, CT_OP_cast, 1, &t, (int64_t[]){CT_F32}, 1, NULL, 0);
        break;
    }
    }
    graph_mark_output(g, y);
}

/* sgd (variants 0-3: nesterov or not, apply 0 or 1) and adamw rules 0, 1, 3
 * (4-6) and 2 (RAdam) in its warm-up and after it (7, 8); the momentum
 * buffer comes from an expand fused into the update; rmsprop (9: torch's
 * without momentum, 10: TF's with it and an apply of 1, 11: torch's with
 * momentum and an apply of 0) and adagrad (12); grad_accumulate with an
 * update of 0 and of 1 (13, 14); lion with an apply of 1 (15), adamx
 * rules 0-3 (16-19) and 4 (LaProp, 24), madgrad with and without momentum
 * (20, 21), adan with and without no_prox (22, 23). */
static void build_update(Graph *g, const Ins *in, int variant)
{
    ValueId lr = in->s;
    if (variant == 15) {
        ValueId one = test_node(g, CT_OP_scale_shift, 1, &in->s, NULL, 0, (double[]){0, 1}, 2);
        ValueId m = test_node(g, CT_OP_expand, 1, &in->y, (int64_t[]){4, 2, 3, 4, 5}, 5, NULL, 0);
        test_node(g, CT_OP_lion_update, 5, (ValueId[]){in->pos, in->x, m, lr, one}, NULL, 0,
                  (double[]){0.9, 0.99, 0.05}, 3);
    } else if ((variant >= 16 && variant <= 19) || variant == 24) {
        ValueId m = test_node(g, CT_OP_scale_shift, 1, &in->x, NULL, 0, (double[]){0.1, 0}, 2);
        ValueId avg = test_node(g, CT_OP_scale_shift, 1, &in->s, NULL, 0, (double[]){0.5, 0}, 2);
        test_node(g, CT_OP_adamx_update, variant == 24 ? 7 : 6,
                  (ValueId[]){in->pos, in->x, m, in->pos, lr, in->step, avg},
                  (int64_t[]){variant == 24 ? 4 : variant - 16, 0}, 2, (double[]){0.9, 0.999, 1e-8, 0.05, 0.333}, 5);
    } else if (variant == 20 || variant == 21) {
        ValueId sum = test_node(g, CT_OP_scale_shift, 1, &in->x, NULL, 0, (double[]){0.5, 0}, 2);
        test_node(g, CT_OP_madgrad_update, 7, (ValueId[]){in->pos, in->x, in->pos, sum, in->pos, lr, in->step},
                  (int64_t[]){variant == 21}, 1, (double[]){variant == 20 ? 0.9 : 0, 0.01, 1e-6}, 3);
    } else if (variant >= 22 && variant <= 23) {
        ValueId m = test_node(g, CT_OP_scale_shift, 1, &in->x, NULL, 0, (double[]){0.1, 0}, 2);
        test_node(g, CT_OP_adan_update, 8, (ValueId[]){in->pos, in->x, m, m, in->pos, in->pos, lr, in->step},
                  (int64_t[]){variant == 23}, 1, (double[]){0.98, 0.92, 0.99, 1e-8, 0.02}, 5);
    } else if (variant < 4) {
        ValueId buf = test_node(g, CT_OP_expand, 1, &in->y, (int64_t[]){4, 2, 3, 4, 5}, 5, NULL, 0);
        ValueId ins[5] = {in->pos, in->x, buf, lr, lr};
        int nin = 4;
        if (variant >= 2) { /* apply: the scalar 0 or 1 */
            ins[4] = test_node(g, CT_OP_scale_shift, 1, &in->s, NULL, 0, (double[]){0, variant - 2}, 2);
            nin = 5;
        }
        test_node(g, CT_OP_sgd_update, nin, ins, (int64_t[]){variant & 1}, 1, (double[]){0.9, 1e-2}, 2);
    } else if (variant >= 9 && variant <= 11) {
        ValueId sq = test_node(g, CT_OP_scale_shift, 1, &in->pos, NULL, 0, (double[]){0.5, 0.1}, 2);
        ValueId buf = test_node(g, CT_OP_expand, 1, &in->y, (int64_t[]){4, 2, 3, 4, 5}, 5, NULL, 0);
        ValueId ins[6] = {in->pos, in->x, sq, buf, lr, lr};
        if (variant > 9)
            ins[5] = test_node(g, CT_OP_scale_shift, 1, &in->s, NULL, 0, (double[]){0, variant == 10}, 2);
        test_node(g, CT_OP_rmsprop_update, variant > 9 ? 6 : 5, ins, (int64_t[]){variant == 10}, 1,
                  (double[]){0.9, 1e-8, 0.01, variant == 9 ? 0 : 0.9}, 4);
    } else if (variant >= 13 && variant <= 14) {
        ValueId up = test_node(g, CT_OP_scale_shift, 1, &in->s, NULL, 0, (double[]){0, variant - 13}, 2);
        test_node(g, CT_OP_grad_accumulate, 3, (ValueId[]){in->pos, in->x, up}, NULL, 0, NULL, 0);
    } else if (variant == 12) {
        ValueId sum = test_node(g, CT_OP_scale_shift, 1, &in->pos, NULL, 0, (double[]){2, 0}, 2);
        test_node(g, CT_OP_adagrad_update, 4, (ValueId[]){in->pos, in->x, sum, lr}, NULL, 0,
                  (double[]){1e-10, 0.01}, 2);
    } else {
        int64_t rule = variant == 4 ? 0 : variant == 5 ? 1 : variant == 6 ? 3 : 2;
        ValueId m = test_node(g, CT_OP_scale_shift, 1, &in->x, NULL, 0, (double[]){0.1, 0}, 2);
        ValueId ins[6] = {in->pos, in->x, m, in->pos, lr, variant == 8 ? in->late : in->step};
        test_node(g, CT_OP_adamw_update, 6, ins, &rule, 1, (double[]){0.9, 0.999, 1e-8, 0.05}, 4);
    }
    const Node *n = &g->nodes[g->nnodes - 1];
    for (int o = 0; o < n->nout; o++)
        graph_mark_output(g, n->out[o]);
}

/* Fused chains: relu(x + y) * s -> gelu, with the middle value also an
 * output; act_grad(silu) of a sum, divided by a broadcast; a reshape inside
 * a chain. */
static void build_chain(Graph *g, const Ins *in, int variant)
{
    if (variant == 0) {
        ValueId a = test_node(g, CT_OP_add, 2, (ValueId[]){in->x, in->y}, NULL, 0, NULL, 0);
        ValueId r = test_node(g, CT_OP_relu, 1, &a, NULL, 0, NULL, 0);
        ValueId m = test_node(g, CT_OP_mul, 2, (ValueId[]){r, in->s}, NULL, 0, NULL, 0);
        graph_mark_output(g, test_node(g, CT_OP_gelu, 1, &m, (int64_t[]){0}, 1, NULL, 0));
        graph_mark_output(g, r);
    } else if (variant == 1) {
        ValueId d = test_node(g, CT_OP_add, 2, (ValueId[]){in->pos, in->x}, NULL, 0, NULL, 0);
        ValueId ag = test_node(g, CT_OP_act_grad, 2, (ValueId[]){in->x, d}, (int64_t[]){CT_OP_silu, 0}, 2, NULL, 0);
        graph_mark_output(g, test_node(g, CT_OP_div, 2, (ValueId[]){ag, in->ypos}, NULL, 0, NULL, 0));
    } else {
        ValueId r = test_node(g, CT_OP_hard_swish, 1, &in->x, NULL, 0, NULL, 0);
        ValueId v = test_node(g, CT_OP_reshape, 1, &r, (int64_t[]){2, 6, 20}, 3, NULL, 0);
        ValueId m = test_node(g, CT_OP_mul, 2, (ValueId[]){v, in->s}, NULL, 0, NULL, 0);
        graph_mark_output(g, test_node(g, CT_OP_scale_shift, 1, &m, NULL, 0, (double[]){2, -1}, 2));
    }
}

/* Memory in the values' layouts (the GPU's): relu(x + b) with x and the
 * results channels-last, b [3,1,1] broadcast along C; the kernel reads and
 * writes N,H,W,C memory and gives the ref's logical results. */
static void test_channels_last(KernelCache *cache)
{
    enum { N = 2, C = 3, H = 4, W = 5 };
    Graph g;
    FusePlan p;
    CtErr err;
    CtBuf src = {0};
    HostModule m = {0};
    KirKernel ks[2] = {0};
    CtTensor in[2], ref_out[2];
    memset(ref_out, 0, sizeof ref_out);
    int nin;
    graph_init(&g);
    ValueId x = input(&g, "x", CT_F32, 4, (int64_t[]){N, C, H, W}), b = input(&g, "y", CT_F32, 3, (int64_t[]){C, 1, 1});
    ValueId a = test_node(&g, CT_OP_add, 2, (ValueId[]){x, b}, NULL, 0, NULL, 0);
    ValueId r = test_node(&g, CT_OP_relu, 1, &a, NULL, 0, NULL, 0);
    g.values[x].layout = g.values[a].layout = g.values[r].layout = CT_LAYOUT_CHANNELS_LAST;
    graph_mark_output(&g, r);
    graph_mark_output(&g, a);
    fill_inputs(&g, in, &nin);
    void **mem = calloc((size_t)g.nvalues, sizeof *mem);
    CtState st;
    state_create(&st, &g);
    CHECK(backend_run_once(&ct_backend_ref, &g, &st, in, nin, ref_out, NULL, &err) == 0);
    state_free(&st);
    CHECK(fuse_plan(&g, &p, &err) == 0 && p.kernels_after == 1);
    if (lower_all(&g, &p, (KirOptions){KIR_F32, 1}, ks, &src) == 0 && host_compile(&hc, cache, src.s, &m, &err) == 0) {
        alloc_values(&g, in, mem);
        const float *xs = in[0].data;
        float *xm = mem[x];
        for (int i = 0; i < N * C * H * W; i++) { /* i: the logical N,C,H,W index */
            int w = i % W, h = i / W % H, c = i / (W * H) % C, n = i / (W * H * C);
            xm[((n * H + h) * W + w) * C + c] = xs[i];
        }
        run_compiled(&g, &p, ks, &m, mem);
        double worst = 0;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < N * C * H * W; i++) {
                int w = i % W, h = i / W % H, c = i / (W * H) % C, n = i / (W * H * C);
                double d = fabs(((float *)mem[k ? a : r])[((n * H + h) * W + w) * C + c] -
                                ((const float *)ref_out[k].data)[i]);
                worst = d > worst ? d : worst;
            }
        CHECKF(worst <= 1e-6, "channels-last: max abs err %.3e", worst);
        printf("channels-last relu(x + b): max abs err %.2e\n", worst);
    } else {
        CHECKF(0, "channels-last: %s", err.msg);
    }
    host_module_close(&m);
    kir_free(&ks[0]);
    buf_free(&src);
    fuse_free(&p);
    tensor_free(&ref_out[0]);
    tensor_free(&ref_out[1]);
    for (int k = 0; k < nin; k++)
        tensor_free(&in[k]);
    for (ValueId v = 0; v < g.nvalues; v++)
        free(mem[v]);
    free(mem);
    graph_free(&g);
}

static void test_ops(KernelCache *cache)
{
    for (int v = 0; v < 2 * NACTS; v++)
        if (acts[v / 2] == CT_OP_gelu || !(v & 1)) {
            check_case("activation", build_act, v, cache);
            check_case("act_grad", build_act_grad, v, cache);
        }
    for (int v = 0; v < 13; v++)
        check_case("binary/scale/clamp/cast", build_misc, v, cache);
    for (int v = 0; v < 25; v++)
        check_case("optimizer update", build_update, v, cache);
    for (int v = 0; v < 3; v++)
        check_case("fused chain", build_chain, v, cache);
    for (int op = 0; op < CT_NOPS; op++) {
        OpFusion f = op_def((CtOp)op)->fusion;
        CHECKF(!(f == OP_ELEMENTWISE || f == OP_ACTIVATION || f == OP_VIEW) || covered[op],
               "op %s joins fused kernels but no case lowers it", op_def((CtOp)op)->name);
    }
}

/* Flips a byte in the middle of every entry in dir. */
static void corrupt_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r+b");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        long mid = ftell(f) / 2;
        fseek(f, mid, SEEK_SET);
        int c = fgetc(f);
        fseek(f, mid, SEEK_SET);
        fputc(c ^ 0x5a, f);
        fclose(f);
    }
    if (d)
        closedir(d);
}

/* The chain graph's kernels (two translation units: f32 and exact):
 * compiled once, then memory hits; a new cache on the same directory: disk
 * hits and no compile; every entry corrupted: exactly one compile each,
 * counted as corrupt, and right results. */
static void test_cache_use(void)
{
    char dir[sizeof cache_dir + 8];
    snprintf(dir, sizeof dir, "%s/graph", cache_dir);
    for (int round = 0; round < 3; round++) {
        KernelCache c;
        CtErr err;
        if (round == 2)
            corrupt_entries(dir);
        if (cache_open(&c, &(CacheOptions){.dir = dir}, &err)) {
            CHECKF(0, "cache_open: %s", err.msg);
            return;
        }
        check_case("cached chain", build_chain, 0, &c);
        if (round == 0)
            check_case("cached chain again", build_chain, 0, &c);
        CacheStats s = cache_stats(&c);
        unsigned long long want_compiles = round == 1 ? 0 : 2, want_hits = round == 2 ? 0 : 2;
        CHECKF(s.compiles == want_compiles && (round ? s.disk_hits : s.mem_hits) == want_hits &&
                   s.corrupt == (round == 2 ? 2u : 0u),
               "round %d: compiles %llu, memory hits %llu, disk hits %llu, corrupt %llu", round,
               (unsigned long long)s.compiles, (unsigned long long)s.mem_hits, (unsigned long long)s.disk_hits,
               (unsigned long long)s.corrupt);
        cache_close(&c);
    }
}

int main(void)
{
    CtErr err;
    if (host_compiler_init(&hc, &err)) {
        printf("test_codegen: skipped: %s\n", err.msg);
        return 0;
    }
    snprintf(cache_dir, sizeof cache_dir, "/tmp/ctimm-codegen-XXXXXX");
    if (!mkdtemp(cache_dir)) {
        CHECK(0);
        return check_done("test_codegen");
    }
    /* every case in one in-memory cache: each case is its own graph */
    KernelCache c;
    CHECK(cache_open(&c, &(CacheOptions){.no_cache = 1}, &err) == 0);
    test_ops(&c);
    test_channels_last(&c);
    cache_close(&c);
    test_cache_use();
    test_rm_tree(cache_dir);
    return check_done("test_codegen");
}
