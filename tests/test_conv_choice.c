/* Which convolutions the cpu backend runs through oneDNN
 * (runtime/cpu/conv_choice.h): CTIMM_CONV=onednn puts every f32 one there
 * (a stride-2 3x3 with bias, a depthwise, a strided 1x1 and both gradients
 * of each), with the own kernels' results within 1e-5; "own" puts none
 * there; "auto" times each geometry once per process (a second program
 * reads every choice from the cache and agrees with the first bit for bit);
 * a bad value fails the prepare naming it; the backend's note says all of
 * it. A convolution whose step ends in a residual add and/or an activation
 * (each activation oneDNN has a post-op for) runs as one primitive with
 * them as post-ops, within 1e-5 of the own kernels' node-by-node results;
 * one whose pre-activation output is also an output keeps its epilogue
 * apart; the values between convolutions only stay blocked. Pooling and
 * its gradients on oneDNN match the own loops, but for a ceil_mode average
 * whose divisor oneDNN counts otherwise, left on them. Built without
 * oneDNN: "onednn" fails saying so and the note says the
 * own kernels run. test_cpu runs under both forced modes too (ctest), each
 * geometry against the ref backend. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/backend.h"

static ValueId input(Graph *g, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return graph_add_value(g, (CtType){{4, {a, b, c, d}}, CT_F32}, CT_ROLE_INPUT, NULL);
}

/* conv2d (x, w[, bias]) and its two gradients with dy = y * y, all outputs. */
static void add_conv(Graph *g, ValueId x, ValueId w, ValueId bias, const int64_t a[7])
{
    CtErr err;
    Node n = {.op = CT_OP_conv2d, .nin = bias >= 0 ? 3 : 2, .in = {x, w, bias}};
    memcpy(n.iattr, a, 7 * sizeof *a);
    int id = graph_add_node(g, &n, "conv", &err);
    CHECKF(id >= 0, "%s", err.msg);
    ValueId y = g->nodes[id].out[0];
    ValueId dy = g->nodes[graph_add_node(g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, "dy", &err)].out[0];
    Node gi = {.op = CT_OP_conv2d_grad_input, .nin = 2, .in = {dy, w}};
    Node gw = {.op = CT_OP_conv2d_grad_weight, .nin = 2, .in = {x, dy}};
    memcpy(gi.iattr, a, 7 * sizeof *a);
    memcpy(gw.iattr, a, 7 * sizeof *a);
    gi.iattr[7] = g->values[x].type.shape.d[2];
    gi.iattr[8] = g->values[x].type.shape.d[3];
    gw.iattr[7] = g->values[w].type.shape.d[2];
    gw.iattr[8] = g->values[w].type.shape.d[3];
    graph_mark_output(g, y);
    graph_mark_output(g, g->nodes[graph_add_node(g, &gi, "gi", &err)].out[0]);
    graph_mark_output(g, g->nodes[graph_add_node(g, &gw, "gw", &err)].out[0]);
}

static void build(Graph *g)
{
    graph_init(g);
    ValueId x = input(g, 2, 8, 13, 12), w = input(g, 16, 8, 3, 3);
    ValueId b = graph_add_value(g, (CtType){{1, {16}}, CT_F32}, CT_ROLE_INPUT, NULL);
    add_conv(g, x, w, b, (int64_t[]){2, 2, 1, 1, 1, 1, 1});
    ValueId xd = input(g, 2, 24, 10, 11), wd = input(g, 24, 1, 5, 5);
    add_conv(g, xd, wd, -1, (int64_t[]){1, 1, 2, 2, 1, 1, 24});
    ValueId wp = input(g, 12, 8, 1, 1);
    add_conv(g, x, wp, -1, (int64_t[]){2, 2, 0, 0, 1, 1, 1});
}

static ValueId node1(Graph *g, CtOp op, ValueId a, ValueId b, int64_t attr0)
{
    CtErr err;
    int id = graph_add_node(g, &(Node){.op = op, .nin = b >= 0 ? 2 : 1, .in = {a, b}, .iattr = {attr0}}, "epi", &err);
    CHECKF(id >= 0, "%s", err.msg);
    return g->nodes[id].out[0];
}

static ValueId conv3(Graph *g, ValueId x, ValueId w, ValueId bias)
{
    CtErr err;
    Node n = {.op = CT_OP_conv2d, .nin = bias >= 0 ? 3 : 2, .in = {x, w, bias}, .iattr = {1, 1, 1, 1, 1, 1, 1}};
    int id = graph_add_node(g, &n, "conv", &err);
    CHECKF(id >= 0, "%s", err.msg);
    return g->nodes[id].out[0];
}

/* Convolutions ending in epilogues: + residual then relu, + residual alone,
 * and each activation; the last one's own output is an output too. */
static void build_epilogues(Graph *g)
{
    graph_init(g);
    ValueId x = input(g, 2, 16, 9, 10), w = input(g, 32, 16, 3, 3), r = input(g, 2, 32, 9, 10);
    ValueId b = graph_add_value(g, (CtType){{1, {32}}, CT_F32}, CT_ROLE_INPUT, NULL);
    graph_mark_output(g, node1(g, CT_OP_relu, node1(g, CT_OP_add, conv3(g, x, w, b), r, 0), -1, 0));
    graph_mark_output(g, node1(g, CT_OP_add, r, conv3(g, x, w, -1), 0));
    static const CtOp acts[] = {CT_OP_silu, CT_OP_sigmoid, CT_OP_hard_sigmoid, CT_OP_hard_swish, CT_OP_gelu,
                                CT_OP_gelu};
    for (int k = 0; k < 6; k++)
        graph_mark_output(g, node1(g, acts[k], conv3(g, x, w, b), -1, k == 5));
    ValueId y = conv3(g, x, w, b);
    graph_mark_output(g, node1(g, CT_OP_relu, y, -1, 0));
    graph_mark_output(g, y);
    /* a chain: c1 to one convolution, c2 to two, one of them with a residual */
    ValueId w2 = input(g, 32, 32, 3, 3);
    ValueId c1 = node1(g, CT_OP_silu, conv3(g, x, w, b), -1, 0);
    ValueId c2 = node1(g, CT_OP_relu, conv3(g, c1, w2, -1), -1, 0);
    graph_mark_output(g, conv3(g, c2, w2, b));
    graph_mark_output(g, node1(g, CT_OP_add, conv3(g, c2, w2, -1), r, 0));
}

/* A pooling node (op, attributes a: kh kw sh sw ph pw ceil_mode
 * count_include_pad) of x and its gradient with dy = y * y, both outputs. */
static void add_pool(Graph *g, CtOp op, ValueId x, const int64_t a[8])
{
    CtErr err;
    Node n = {.op = op, .nin = 1, .in = {x}};
    memcpy(n.iattr, a, 8 * sizeof *a);
    int id = graph_add_node(g, &n, "pool", &err);
    CHECKF(id >= 0, "%s", err.msg);
    ValueId y = g->nodes[id].out[0];
    ValueId dy = g->nodes[graph_add_node(g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, "dy", &err)].out[0];
    int max = op == CT_OP_max_pool2d;
    Node gn = {.op = max ? CT_OP_max_pool2d_grad : CT_OP_avg_pool2d_grad, .nin = max ? 2 : 1,
               .in = {max ? x : dy, dy}};
    memcpy(gn.iattr, a, 8 * sizeof *a);
    gn.iattr[8] = g->values[x].type.shape.d[2];
    gn.iattr[9] = g->values[x].type.shape.d[3];
    id = graph_add_node(g, &gn, "pool_grad", &err);
    CHECKF(id >= 0, "%s", err.msg);
    graph_mark_output(g, y);
    graph_mark_output(g, g->nodes[id].out[0]);
}

/* ResNet's stem max pool (3x3 s2 p1), a 2x2 s2 average counting padding, a
 * 3x3 s1 p1 one not counting it, each with its gradient, on oneDNN; and a
 * ceil_mode average counting padding whose last window reaches past it
 * (PyTorch's divisor and oneDNN's differ there), on the own loops. */
static void build_pools(Graph *g)
{
    graph_init(g);
    ValueId x = input(g, 2, 8, 13, 12);
    add_pool(g, CT_OP_max_pool2d, x, (int64_t[]){3, 3, 2, 2, 1, 1, 0, 0});
    add_pool(g, CT_OP_avg_pool2d, x, (int64_t[]){2, 2, 2, 2, 0, 0, 0, 1});
    add_pool(g, CT_OP_avg_pool2d, x, (int64_t[]){3, 3, 1, 1, 1, 1, 0, 0});
    add_pool(g, CT_OP_avg_pool2d, x, (int64_t[]){3, 3, 2, 2, 1, 1, 1, 1});
}

/* One run of g on the cpu backend under CTIMM_CONV=mode: 0 and the outputs
 * and the backend's note, or -1 with err. */
static int run(const Graph *g, const char *mode, const CtTensor *in, int nin, CtTensor *out, char *note, CtErr *err)
{
    setenv("CTIMM_CONV", mode, 1);
    CtRunner r;
    if (backend_open(&r, &ct_backend_cpu, g, NULL, NULL, err))
        return -1;
    const char *s = ct_backend_cpu.note ? ct_backend_cpu.note(r.exec) : NULL;
    snprintf(note, 256, "%s", s ? s : "");
    int rc = backend_step(&r, in, nin, out, err);
    backend_close(&r);
    return rc;
}

static double rel(const CtTensor *a, const CtTensor *b)
{
    int64_t n = shape_numel(&a->type.shape);
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double u = ((float *)a->data)[i], v = ((float *)b->data)[i];
        d += (u - v) * (u - v);
        s += v * v;
    }
    return sqrt(d / (s > 0 ? s : 1));
}

static void free_outs(CtTensor *o, int n)
{
    for (int k = 0; k < n; k++)
        tensor_free(&o[k]);
}

static void random_inputs(const Graph *g, CtTensor *in, int *nin)
{
    uint32_t seed = 99;
    *nin = 0;
    for (ValueId v = 0; v < g->nvalues; v++)
        if (g->values[v].role == CT_ROLE_INPUT) {
            int64_t n = shape_numel(&g->values[v].type.shape);
            float *p = malloc(sizeof *p * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                seed = seed * 1664525u + 1013904223u;
                p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
            }
            in[(*nin)++] = (CtTensor){g->values[v].type, p};
        }
}

#ifdef CTIMM_HAVE_DNNL
static void check_pools(void)
{
    Graph g;
    build_pools(&g);
    CtTensor in[1];
    int nin;
    random_inputs(&g, in, &nin);
    enum { NOUT = 8 };
    CHECK(g.noutputs == NOUT);
    CtTensor own[NOUT], dn[NOUT];
    char note[256];
    CtErr err = {{0}};
    CHECKF(run(&g, "own", in, nin, own, note, &err) == 0, "%s", err.msg);
    CHECKF(!strcmp(note, "Pooling: ctimm's own kernels (CTIMM_CONV=own)"), "%s", note);
    CHECKF(run(&g, "onednn", in, nin, dn, note, &err) == 0, "%s", err.msg);
    CHECKF(!strcmp(note, "Pooling: 6 of 8 on oneDNN (CTIMM_CONV=onednn)"), "%s", note);
    for (int k = 0; k < NOUT; k++)
        CHECKF(rel(&dn[k], &own[k]) < 1e-6, "pooling output %d: oneDNN against the own kernels: %.3e", k,
               rel(&dn[k], &own[k]));
    free_outs(own, NOUT);
    free_outs(dn, NOUT);
    free(in[0].data);
    graph_free(&g);
}

static void check_epilogues(void)
{
    Graph g;
    build_epilogues(&g);
    CtTensor in[8];
    int nin;
    random_inputs(&g, in, &nin);
    enum { NOUT = 12 };
    CHECK(g.noutputs == NOUT);
    CtTensor own[NOUT], dn[NOUT];
    char note[256];
    CtErr err = {{0}};
    CHECKF(run(&g, "own", in, nin, own, note, &err) == 0, "%s", err.msg);
    CHECKF(run(&g, "onednn", in, nin, dn, note, &err) == 0, "%s", err.msg);
    CHECKF(strstr(note, "Convolutions: 13 of 13 on oneDNN") && strstr(note, "; 11 with their epilogue as post-ops") &&
               strstr(note, "; 2 values passed on blocked"),
           "%s", note);
    for (int k = 0; k < NOUT; k++)
        CHECKF(rel(&dn[k], &own[k]) < 1e-5, "epilogue output %d: oneDNN against the own kernels: %.3e", k,
               rel(&dn[k], &own[k]));
    free_outs(own, NOUT);
    free_outs(dn, NOUT);
    for (int k = 0; k < nin; k++)
        free(in[k].data);
    graph_free(&g);
}
#endif

int main(void)
{
    Graph g;
    build(&g);
    CtTensor in[8];
    int nin;
    random_inputs(&g, in, &nin);
    enum { NOUT = 9 };
    CHECK(g.noutputs == NOUT);
    CtTensor own[NOUT], dn[NOUT];
    char note[256];
    CtErr err = {{0}};
    CHECKF(run(&g, "own", in, nin, own, note, &err) == 0, "%s", err.msg);
#ifdef CTIMM_HAVE_DNNL
    CHECKF(!strcmp(note, "Convolutions: ctimm's own kernels (CTIMM_CONV=own)"), "%s", note);
    CHECKF(run(&g, "onednn", in, nin, dn, note, &err) == 0, "%s", err.msg);
    CHECKF(strstr(note, "Convolutions: 9 of 9 on oneDNN") && strstr(note, "(CTIMM_CONV=onednn)"), "%s", note);
    for (int k = 0; k < NOUT; k++)
        CHECKF(rel(&dn[k], &own[k]) < 1e-5, "output %d: oneDNN against the own kernels: %.3e", k,
               rel(&dn[k], &own[k]));
    free_outs(dn, NOUT);
    /* a cache of its own, so the first program times every geometry */
    CtTensor a1[NOUT], a2[NOUT];
    char dir[] = "/tmp/ctimm-conv-choice-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("CTIMM_CACHE_DIR", dir, 1);
    CHECKF(run(&g, "auto", in, nin, a1, note, &err) == 0, "%s", err.msg);
    CHECKF(strstr(note, ": 9 timed now, 0 cached)"), "%s", note);
    CHECKF(run(&g, "auto", in, nin, a2, note, &err) == 0, "%s", err.msg);
    CHECKF(strstr(note, ": 0 timed now, 9 cached)"), "%s", note);
    for (int k = 0; k < NOUT; k++) {
        CHECKF(!memcmp(a1[k].data, a2[k].data, (size_t)shape_numel(&a1[k].type.shape) * sizeof(float)),
               "output %d differs between two programs of one process", k);
        CHECKF(rel(&a1[k], &own[k]) < 1e-5, "output %d: %.3e", k, rel(&a1[k], &own[k]));
    }
    free_outs(a1, NOUT);
    free_outs(a2, NOUT);
    test_rm_tree(dir);
    check_epilogues();
    check_pools();
#else
    CHECKF(strstr(note, "own kernels (built without oneDNN)"), "%s", note);
    CHECK(run(&g, "onednn", in, nin, dn, note, &err) != 0);
    CHECKF(strstr(err.msg, "no oneDNN"), "%s", err.msg);
#endif
    free_outs(own, NOUT);
    CHECK(run(&g, "fast", in, nin, dn, note, &err) != 0);
    CHECKF(strstr(err.msg, "CTIMM_CONV=fast: use auto, onednn or own"), "%s", err.msg);
    for (int k = 0; k < nin; k++)
        free(in[k].data);
    graph_free(&g);
    return check_done("test_conv_choice");
}
