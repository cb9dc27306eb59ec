/* The cpu backend against the ref backend: each test model's eval logits
 * and one whole SGD training step (logits, loss, every gradient, every
 * updated parameter, buffer and momentum buffer) on the reference vectors'
 * weights, and the GEMM paths of convolution (stride, padding, dilation,
 * groups, depthwise, 1x1, both gradients; NCHW and NHWC), linear, matmul and sdpa, and
 * pooling, permutes, pads, softmax, layer norm, group norm and gather on random inputs. All within 1e-4 relative error
 * (||a-b|| / ||b||). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_vectors.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/backend.h"

#define TOL 1e-4

static const CtBackend *cpu, *ref;

/* Runs g on both backends from copies of `state` and compares every output
 * and every state tensor afterwards. */
static void compare_run(const char *what, const Graph *g, const CtState *state, const CtTensor *in, int nin,
                        double tol)
{
    CtState s[2];
    CtTensor *out[2];
    CtErr err;
    const CtBackend *be[2] = {cpu, ref};
    for (int b = 0; b < 2; b++) {
        state_create(&s[b], g);
        if (state)
            memcpy(s[b].data, state->data, state->nbytes);
        out[b] = calloc((size_t)g->noutputs, sizeof *out[b]);
        int rc = backend_run_once(be[b], g, &s[b], in, nin, out[b], NULL, &err);
        CHECKF(rc == 0, "%s on %s: %s", what, be[b]->name, err.msg);
        if (rc)
            goto free_runs;
    }
    double worst = 0;
    for (int k = 0; k < g->noutputs; k++) {
        const CtType *t = &g->values[g->outputs[k]].type;
        int64_t cnt = shape_numel(&t->shape);
        if (t->dtype != CT_F32 && t->dtype != CT_F16 && t->dtype != CT_BF16)
            continue;
        float *w[2];
        for (int b = 0; b < 2; b++) {
            w[b] = malloc(sizeof *w[b] * (size_t)(cnt ? cnt : 1));
            elems_to_f32(out[b][k].data, t->dtype, cnt, w[b]);
        }
        double e = rel_err(w[0], w[1], cnt);
        free(w[0]);
        free(w[1]);
        CHECKF(e <= tol, "%s: output %d: %.3e", what, k, e);
        worst = e > worst ? e : worst;
    }
    for (int i = 0; i < s[0].n; i++)
        if (s[0].e[i].type.dtype == CT_F32) {
            double e = rel_err(state_data(&s[0], i), state_data(&s[1], i), shape_numel(&s[0].e[i].type.shape));
            CHECKF(e <= tol, "%s: state '%s': %.3e", what, s[0].e[i].name, e);
            worst = e > worst ? e : worst;
        } else {
            CHECKF(memcmp(state_data(&s[0], i), state_data(&s[1], i),
                          (size_t)shape_numel(&s[0].e[i].type.shape) * ct_dtype_size(s[0].e[i].type.dtype)) == 0,
                   "%s: state '%s' differs", what, s[0].e[i].name);
        }
    printf("%s: %d outputs, %d state tensors, worst rel err %.2e\n", what, g->noutputs, s[0].n, worst);
free_runs:
    for (int b = 0; b < 2; b++) {
        if (out[b])
            for (int k = 0; k < g->noutputs; k++)
                tensor_free(&out[b][k]);
        free(out[b]);
        state_free(&s[b]);
    }
}

/* Eval logits and one SGD step of `model` on its reference vectors, in
 * NCHW, and with channels_last set also through the layout pass (NHWC
 * activations inside, the same inputs and state outside). */
static void test_model(const char *model, int channels_last)
{
    char what[128];
    CtErr err;
    Vectors v;
    if (vectors_open(&v, model, 1))
        return;
    const ModelEntry *m = v.m;
    CtTensor *in = v.in;
    for (int training = 0; training < 2; training++) {
        ModelSpec spec = {.batch_size = v.batch, .training = training, .args = v.args};
        OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4,
                         .no_weight_decay = m->no_weight_decay};
        Graph g;
        TrainStep ts;
        CtState state;
        int built = model_build(m, &spec, &g, &err) == 0;
        CHECKF(built, "%s: %s", model, err.msg);
        if (!built)
            continue;
        if (training && train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1}, &sgd, &ts,
                                         &err)) {
            CHECKF(0, "%s: %s", model, err.msg);
            graph_free(&g);
            continue;
        }
        for (int cl = 0; cl <= channels_last; cl++) {
            Graph l;
            if (cl) {
                int laid = layout_channels_last(&g, &l, &err) == 0;
                CHECKF(laid, "%s: %s", model, err.msg);
                if (!laid)
                    break;
                graph_free(&g);
                g = l;
            }
            state_create(&state, &g);
            CHECKF(state_load(&state, &v.f, "state.", &err) == 0, "%s: %s", model, err.msg);
            snprintf(what, sizeof what, "%s %s%s", model, training ? "sgd step" : "eval", cl ? " channels_last" : "");
            compare_run(what, &g, &state, in, training ? 4 : 1, TOL);
            state_free(&state);
        }
        if (training)
            train_step_free(&ts);
        graph_free(&g);
    }
    st_free(&v.f);
}

static float *random_floats(int64_t n, uint32_t *rng)
{
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        *rng = *rng * 1664525u + 1013904223u;
        p[i] = (float)((*rng >> 8) / 16777216.0 * 2 - 1);
    }
    return p;
}

/* A graph of one node (plus its conv gradients) on random inputs. */
typedef struct OpCase {
    const char *name;
    CtOp op;
    int nin;
    CtShape shape[4];
    int64_t iattr[CT_MAX_IATTR]; /* sdpa: its gradient's (dbias, packed) */
    double fattr[CT_MAX_FATTR];
} OpCase;

static void test_op(const OpCase *c)
{
    Graph g;
    CtErr err;
    CtTensor in[4];
    ValueId v[4] = {-1, -1, -1, -1};
    uint32_t rng = 7;
    graph_init(&g);
    for (int k = 0; k < c->nin; k++) {
        v[k] = graph_add_value(&g, (CtType){c->shape[k], CT_F32}, CT_ROLE_INPUT, NULL);
        in[k] = (CtTensor){{c->shape[k], CT_F32}, random_floats(shape_numel(&c->shape[k]), &rng)};
    }
    Node n = {.op = c->op, .nin = c->nin};
    memcpy(n.in, v, sizeof v);
    if (c->op != CT_OP_sdpa)
        memcpy(n.iattr, c->iattr, sizeof n.iattr);
    else
        n.iattr[0] = c->iattr[1];
    memcpy(n.fattr, c->fattr, sizeof n.fattr);
    int id = graph_add_node(&g, &n, c->name, &err);
    CHECKF(id >= 0, "%s: %s", c->name, err.msg);
    if (id >= 0) {
        ValueId y = g.nodes[id].out[0];
        graph_mark_output(&g, y);
        if (c->op == CT_OP_conv2d) { /* both gradients, with dy = y * y */
            ValueId dy = g.nodes[graph_add_node(&g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, c->name, &err)]
                             .out[0];
            Node gi = {.op = CT_OP_conv2d_grad_input, .nin = 2, .in = {dy, v[1]}};
            Node gw = {.op = CT_OP_conv2d_grad_weight, .nin = 2, .in = {v[0], dy}};
            memcpy(gi.iattr, c->iattr, 7 * sizeof(int64_t));
            memcpy(gw.iattr, c->iattr, 7 * sizeof(int64_t));
            gi.iattr[7] = c->shape[0].d[2];
            gi.iattr[8] = c->shape[0].d[3];
            gw.iattr[7] = c->shape[1].d[2];
            gw.iattr[8] = c->shape[1].d[3];
            int a = graph_add_node(&g, &gi, c->name, &err), b = a >= 0 ? graph_add_node(&g, &gw, c->name, &err) : -1;
            CHECKF(b >= 0, "%s: %s", c->name, err.msg);
            if (b >= 0) {
                graph_mark_output(&g, g.nodes[a].out[0]);
                graph_mark_output(&g, g.nodes[b].out[0]);
            }
        } else if (c->op == CT_OP_max_pool2d || c->op == CT_OP_avg_pool2d) { /* the gradient, dy = y * y */
            ValueId dy = g.nodes[graph_add_node(&g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, c->name, &err)]
                             .out[0];
            Node gr = {.op = c->op == CT_OP_max_pool2d ? CT_OP_max_pool2d_grad : CT_OP_avg_pool2d_grad};
            memcpy(gr.iattr, c->iattr, sizeof gr.iattr);
            if (c->op == CT_OP_max_pool2d) {
                gr.nin = 2;
                gr.in[0] = v[0];
                gr.in[1] = dy;
            } else {
                gr.nin = 1;
                gr.in[0] = dy;
                gr.iattr[8] = c->shape[0].d[2];
                gr.iattr[9] = c->shape[0].d[3];
            }
            int a = graph_add_node(&g, &gr, c->name, &err);
            CHECKF(a >= 0, "%s: %s", c->name, err.msg);
            if (a >= 0)
                graph_mark_output(&g, g.nodes[a].out[0]);
        } else if (c->op == CT_OP_softmax || c->op == CT_OP_layer_norm || c->op == CT_OP_group_norm) {
            ValueId dy = g.nodes[graph_add_node(&g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, c->name, &err)]
                             .out[0];
            Node gr = c->op == CT_OP_softmax
                          ? (Node){.op = CT_OP_softmax_grad, .nin = 2, .in = {y, dy}, .iattr = {c->iattr[0]}}
                          : (Node){.op = c->op == CT_OP_layer_norm ? CT_OP_layer_norm_grad : CT_OP_group_norm_grad,
                                   .nin = 3, .in = {v[0], v[1], dy}, .iattr = {c->iattr[0]}, .fattr = {c->fattr[0]}};
            if (c->op == CT_OP_group_norm && c->nin == 1) /* no affine: group_norm_grad(x, dy) */
                gr.nin = 2, gr.in[1] = dy;
            int a = graph_add_node(&g, &gr, c->name, &err);
            CHECKF(a >= 0, "%s: %s", c->name, err.msg);
            for (int k = 0; a >= 0 && k < g.nodes[a].nout; k++)
                graph_mark_output(&g, g.nodes[a].out[k]);
        } else if (c->op == CT_OP_sdpa) {
            /* the rows' statistics, and two gradients: the first reads the
             * weights the sdpa saved, the second (unpaired) recomputes them
             * from the statistics */
            ValueId stats = g.nodes[id].out[1];
            graph_mark_output(&g, stats);
            ValueId dy = g.nodes[graph_add_node(&g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, c->name, &err)]
                             .out[0];
            Node gr = {.op = CT_OP_sdpa_grad, .nin = c->nin + 3, .in = {v[0], v[1], v[2], dy, y, stats, v[3]},
                       .iattr = {c->iattr[0], c->iattr[1]}, .fattr = {c->fattr[0]}};
            if (c->iattr[1]) /* packed: (qkv, dy, y, stats[, bias]) */
                gr.in[1] = dy, gr.in[2] = y, gr.in[3] = stats, gr.in[4] = v[1];
            for (int j = 0; j < 2; j++) {
                int a = graph_add_node(&g, &gr, c->name, &err);
                CHECKF(a >= 0, "%s: %s", c->name, err.msg);
                for (int k = 0; a >= 0 && k < g.nodes[a].nout; k++)
                    graph_mark_output(&g, g.nodes[a].out[k]);
            }
        }
        compare_run(c->name, &g, NULL, in, c->nin, TOL);
        if (c->op == CT_OP_conv2d) {
            /* also on NHWC values: the own kernels for pointwise, depthwise and Winograd's
             * convolutions, the others through row-major copies */
            Graph l;
            char what[128];
            int laid = layout_channels_last(&g, &l, &err) == 0;
            CHECKF(laid, "%s: %s", c->name, err.msg);
            snprintf(what, sizeof what, "%s channels_last", c->name);
            if (laid) {
                compare_run(what, &l, NULL, in, c->nin, TOL);
                graph_free(&l);
            }
        }
    }
    for (int k = 0; k < c->nin; k++)
        free(in[k].data);
    graph_free(&g);
}

static void test_gemm_ops(void)
{
    static const OpCase cases[] = {
        {"conv 3x3 s1 p1", CT_OP_conv2d, 3, {{4, {2, 5, 9, 9}}, {4, {7, 5, 3, 3}}, {1, {7}}}, {1, 1, 1, 1, 1, 1, 1}, {0}},
        {"conv 3x3 s2 p1", CT_OP_conv2d, 2, {{4, {2, 4, 10, 11}}, {4, {6, 4, 3, 3}}}, {2, 2, 1, 1, 1, 1, 1}, {0}},
        {"conv 5x3 s(2,1) p(2,0) dil(1,2)", CT_OP_conv2d, 2, {{4, {1, 3, 12, 13}}, {4, {4, 3, 5, 3}}},
         {2, 1, 2, 0, 1, 2, 1}, {0}},
        {"conv dil 2 p2", CT_OP_conv2d, 2, {{4, {2, 3, 11, 11}}, {4, {5, 3, 3, 3}}}, {1, 1, 2, 2, 2, 2, 1}, {0}},
        {"conv groups 2", CT_OP_conv2d, 3, {{4, {2, 6, 8, 8}}, {4, {4, 3, 3, 3}}, {1, {4}}}, {1, 1, 1, 1, 1, 1, 2}, {0}},
        {"conv depthwise 7x7 p3", CT_OP_conv2d, 3, {{4, {2, 8, 9, 9}}, {4, {8, 1, 7, 7}}, {1, {8}}},
         {1, 1, 3, 3, 1, 1, 8}, {0}},
        {"conv depthwise 3x3 s2", CT_OP_conv2d, 2, {{4, {2, 6, 9, 10}}, {4, {6, 1, 3, 3}}}, {2, 2, 1, 1, 1, 1, 6}, {0}},
        {"conv depthwise 3x3 s(1,2) p2 dil 2 bias", CT_OP_conv2d, 3, {{4, {2, 4, 9, 8}}, {4, {4, 1, 3, 3}}, {1, {4}}},
         {1, 2, 2, 2, 2, 2, 4}, {0}},
        {"conv depthwise 5x1 p(2,0) s(1,3)", CT_OP_conv2d, 2, {{4, {1, 3, 7, 10}}, {4, {3, 1, 5, 1}}},
         {1, 3, 2, 0, 1, 1, 3}, {0}},
        {"conv depthwise 5x3 p(1,2)", CT_OP_conv2d, 3, {{4, {2, 3, 6, 5}}, {4, {3, 1, 5, 3}}, {1, {3}}},
         {1, 1, 1, 2, 1, 1, 3}, {0}},
        {"conv depthwise 3x3 p0", CT_OP_conv2d, 2, {{4, {1, 2, 5, 4}}, {4, {2, 1, 3, 3}}}, {1, 1, 0, 0, 1, 1, 2}, {0}},
        {"conv depthwise 7x7 p3 threads", CT_OP_conv2d, 3, {{4, {3, 24, 10, 12}}, {4, {24, 1, 7, 7}}, {1, {24}}},
         {1, 1, 3, 3, 1, 1, 24}, {0}},
        /* channels-last: two 16-channel blocks and 8 left, columns four at a time inside the plane */
        {"conv depthwise 3x3 s2 p1 40ch", CT_OP_conv2d, 3, {{4, {2, 40, 14, 19}}, {4, {40, 1, 3, 3}}, {1, {40}}},
         {2, 2, 1, 1, 1, 1, 40}, {0}},
        {"conv depthwise 5x5 s2 p2 32ch", CT_OP_conv2d, 2, {{4, {2, 32, 15, 15}}, {4, {32, 1, 5, 5}}},
         {2, 2, 2, 2, 1, 1, 32}, {0}},
        {"conv depthwise 3x3 p1 dil(1,2) 17ch", CT_OP_conv2d, 2, {{4, {1, 17, 9, 16}}, {4, {17, 1, 3, 3}}},
         {1, 1, 1, 2, 1, 2, 17}, {0}},
        /* im2col's chunks of samples: 5 channels in, past the stem kernel's 4 */
        {"conv 3x3 p1 a sample per GEMM", CT_OP_conv2d, 3, {{4, {2, 5, 48, 48}}, {4, {4, 5, 3, 3}}, {1, {4}}},
         {1, 1, 1, 1, 1, 1, 1}, {0}},
        {"conv 3x3 p1 two samples per GEMM, one left", CT_OP_conv2d, 2, {{4, {3, 5, 32, 40}}, {4, {3, 5, 3, 3}}},
         {1, 1, 1, 1, 1, 1, 1}, {0}},
        /* the stem kernel (at most 4 channels in): passes of 24, 16 and 8 output channels, full and partial
         * vectors of 16 columns, strides 2 and 4, a dilated tap past the row's end, bands of 16 rows */
        {"conv stem 3x3 s2 p1 24+16+8 out", CT_OP_conv2d, 3, {{4, {2, 3, 70, 37}}, {4, {45, 3, 3, 3}}, {1, {45}}},
         {2, 2, 1, 1, 1, 1, 1}, {0}},
        {"conv stem 4x4 s4 32 out", CT_OP_conv2d, 3, {{4, {2, 3, 24, 72}}, {4, {32, 3, 4, 4}}, {1, {32}}},
         {4, 4, 0, 0, 1, 1, 1}, {0}},
        {"conv stem 7x7 s2 p3 1ch", CT_OP_conv2d, 2, {{4, {1, 1, 20, 23}}, {4, {12, 1, 7, 7}}}, {2, 2, 3, 3, 1, 1, 1},
         {0}},
        {"conv stem 3x5 s(1,3) p(0,4) dil(2,3) 2ch", CT_OP_conv2d, 3, {{4, {2, 2, 9, 26}}, {4, {9, 2, 3, 5}}, {1, {9}}},
         {1, 3, 0, 4, 2, 3, 1}, {0}},
        {"conv 1x1 a sample per GEMM", CT_OP_conv2d, 2, {{4, {2, 4, 46, 46}}, {4, {3, 4, 1, 1}}}, {1, 1, 0, 0, 1, 1, 1},
         {0}},
        {"conv 1x1", CT_OP_conv2d, 3, {{4, {2, 16, 5, 5}}, {4, {8, 16, 1, 1}}, {1, {8}}}, {1, 1, 0, 0, 1, 1, 1}, {0}},
        {"conv 1x1 s2", CT_OP_conv2d, 2, {{4, {2, 8, 6, 6}}, {4, {12, 8, 1, 1}}}, {2, 2, 0, 0, 1, 1, 1}, {0}},
        /* Winograd (F(2x2, 3x3) forward, F(4x4, 3x3) gradients): channels past a multiple of 16, tiles past
         * the plane's edge, blocks of several samples (threads) and of a sample's rows (40x40) */
        {"conv 3x3 p1 winograd bias", CT_OP_conv2d, 3, {{4, {2, 20, 9, 11}}, {4, {24, 20, 3, 3}}, {1, {24}}},
         {1, 1, 1, 1, 1, 1, 1}, {0}},
        {"conv 3x3 p0 winograd", CT_OP_conv2d, 2, {{4, {3, 16, 10, 8}}, {4, {17, 16, 3, 3}}}, {1, 1, 0, 0, 1, 1, 1},
         {0}},
        {"conv 3x3 p(2,1) winograd", CT_OP_conv2d, 2, {{4, {1, 33, 7, 13}}, {4, {16, 33, 3, 3}}},
         {1, 1, 2, 1, 1, 1, 1}, {0}},
        {"conv 3x3 p1 winograd threads", CT_OP_conv2d, 2, {{4, {4, 32, 20, 20}}, {4, {48, 32, 3, 3}}},
         {1, 1, 1, 1, 1, 1, 1}, {0}},
        {"conv 3x3 p1 winograd 40x40", CT_OP_conv2d, 2, {{4, {1, 64, 40, 40}}, {4, {64, 64, 3, 3}}},
         {1, 1, 1, 1, 1, 1, 1}, {0}},
        {"conv 4x4 patchify s4", CT_OP_conv2d, 3, {{4, {2, 3, 16, 16}}, {4, {8, 3, 4, 4}}, {1, {8}}},
         {4, 4, 0, 0, 1, 1, 1}, {0}},
        {"linear", CT_OP_linear, 3, {{3, {2, 5, 12}}, {2, {7, 12}}, {1, {7}}}, {0}, {0}},
        {"matmul batched", CT_OP_matmul, 2, {{4, {2, 3, 5, 6}}, {4, {2, 3, 6, 4}}}, {0}, {0}},
        {"matmul shared b", CT_OP_matmul, 2, {{3, {2, 5, 6}}, {2, {6, 4}}}, {0}, {0}},
        /* read transposed (trans_a, trans_b): the backward's products */
        {"matmul a^T", CT_OP_matmul, 2, {{2, {6, 5}}, {2, {6, 4}}}, {1, 0}, {0}},
        {"matmul b^T", CT_OP_matmul, 2, {{2, {5, 6}}, {2, {4, 6}}}, {0, 1}, {0}},
        {"matmul batched a^T b^T", CT_OP_matmul, 2, {{4, {2, 3, 6, 5}}, {4, {2, 3, 4, 6}}}, {1, 1}, {0}},
        {"matmul shared b a^T", CT_OP_matmul, 2, {{3, {2, 6, 5}}, {2, {6, 4}}}, {1, 0}, {0}},
        {"sdpa", CT_OP_sdpa, 3, {{4, {2, 3, 7, 8}}, {4, {2, 3, 5, 8}}, {4, {2, 3, 5, 8}}}, {0}, {0.35}},
        /* rows of 37 keys: two 16-column blocks of the softmax and a padded one */
        {"sdpa 37 keys", CT_OP_sdpa, 3, {{4, {2, 2, 9, 8}}, {4, {2, 2, 37, 8}}, {4, {2, 2, 37, 8}}}, {0}, {0.35}},
        /* a bias broadcast over B (relative positions), over H (a mask), neither; the last without dbias */
        {"sdpa bias [1,H,N,M]", CT_OP_sdpa, 4,
         {{4, {2, 3, 7, 8}}, {4, {2, 3, 5, 8}}, {4, {2, 3, 5, 8}}, {4, {1, 3, 7, 5}}}, {1}, {0.35}},
        {"sdpa bias [B,1,N,M] 37 keys", CT_OP_sdpa, 4,
         {{4, {2, 2, 9, 8}}, {4, {2, 2, 37, 8}}, {4, {2, 2, 37, 8}}, {4, {2, 1, 9, 37}}}, {1}, {0.35}},
        {"sdpa bias [B,H,N,M] no dbias", CT_OP_sdpa, 4,
         {{4, {2, 3, 7, 8}}, {4, {2, 3, 5, 8}}, {4, {2, 3, 5, 8}}, {4, {2, 3, 7, 5}}}, {0}, {0.35}},
        /* packed: qkv [B, N, 3, H, D] in, y [B, N, H, D] out, the rows of a head 3 H D apart */
        {"sdpa packed", CT_OP_sdpa, 1, {{5, {2, 7, 3, 3, 8}}}, {0, 1}, {0.35}},
        {"sdpa packed bias [1,H,N,N] 37 tokens", CT_OP_sdpa, 2, {{5, {2, 37, 3, 2, 8}}, {4, {1, 2, 37, 37}}}, {1, 1},
         {0.35}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_op(&cases[i]);
}

/* A convolution on the stem kernel and an activation of its output, one
 * library step: the kernel applies the activation band by band (compiled.c's
 * conv_act), the convolution's output an output of the graph too or not. */
static void test_stem_act(void)
{
    static const CtOp acts[] = {CT_OP_silu, CT_OP_relu};
    for (int k = 0; k < 2; k++) {
        Graph g;
        CtErr err;
        uint32_t rng = 11;
        CtShape shape[3] = {{4, {2, 3, 41, 35}}, {4, {28, 3, 3, 3}}, {1, {28}}};
        CtTensor in[3];
        Node conv = {.op = CT_OP_conv2d, .nin = 3, .iattr = {2, 2, 1, 1, 1, 1, 1}};
        graph_init(&g);
        for (int i = 0; i < 3; i++) {
            conv.in[i] = graph_add_value(&g, (CtType){shape[i], CT_F32}, CT_ROLE_INPUT, NULL);
            in[i] = (CtTensor){{shape[i], CT_F32}, random_floats(shape_numel(&shape[i]), &rng)};
        }
        int c = graph_add_node(&g, &conv, "stem", &err), a = -1;
        if (c >= 0)
            a = graph_add_node(&g, &(Node){.op = acts[k], .nin = 1, .in = {g.nodes[c].out[0]}}, "stem.act", &err);
        CHECKF(a >= 0, "stem + activation: %s", err.msg);
        if (a >= 0) {
            graph_mark_output(&g, g.nodes[a].out[0]);
            if (k)
                graph_mark_output(&g, g.nodes[c].out[0]);
            compare_run(k ? "conv stem + relu, both outputs" : "conv stem + silu", &g, NULL, in, 3, TOL);
        }
        for (int i = 0; i < 3; i++)
            free(in[i].data);
        graph_free(&g);
    }
}

/* A batch_norm recomputed for the backward, the act_grad of its output and
 * the batch_norm_grad reading it, as the remat pass leaves them: the cpu
 * backend runs the three as one (compiled.c's bn_act_grad_steps), except
 * where the batch_norm's output is also an output of the graph. */
static void test_bn_act_grad(void)
{
    static const CtOp acts[] = {CT_OP_silu, CT_OP_relu, CT_OP_gelu};
    for (int k = 0; k < 4; k++) {
        Graph g;
        CtErr err;
        uint32_t rng = 5;
        /* 5 channels: 819 rows a block channels-last, and a partial one. x and dz come from 1x1
         * convolutions, so that the layout pass stores them channels-last. */
        CtShape xs = {4, {3, 5, 31, 29}}, cs = {1, {5}}, ws = {4, {5, 5, 1, 1}};
        CtShape shapes[8] = {xs, ws, cs, cs, cs, cs, xs, ws};
        CtTensor in[8];
        ValueId v[8];
        graph_init(&g);
        for (int i = 0; i < 8; i++) {
            v[i] = graph_add_value(&g, (CtType){shapes[i], CT_F32}, CT_ROLE_INPUT, NULL);
            in[i] = (CtTensor){{shapes[i], CT_F32}, random_floats(shape_numel(&shapes[i]), &rng)};
        }
        for (float *rv = in[5].data; rv < (float *)in[5].data + 5; rv++) /* a running variance is positive */
            *rv = 1.0f + *rv * *rv;
        int x = graph_add_node(&g, &(Node){.op = CT_OP_conv2d, .nin = 2, .in = {v[0], v[1]}, .iattr = {1, 1, 0, 0, 1, 1, 1}},
                               "x", &err),
            dz = graph_add_node(&g, &(Node){.op = CT_OP_conv2d, .nin = 2, .in = {v[6], v[7]}, .iattr = {1, 1, 0, 0, 1, 1, 1}},
                                "dz", &err),
            bn = -1, a = -1, n = -1;
        if (x >= 0 && dz >= 0)
            bn = graph_add_node(&g, &(Node){.op = CT_OP_batch_norm, .nin = 5,
                                            .in = {g.nodes[x].out[0], v[2], v[3], v[4], v[5]}, .iattr = {1, 0},
                                            .fattr = {0.1, 1e-5}},
                                "bn", &err);
        if (bn >= 0)
            a = graph_add_node(&g, &(Node){.op = CT_OP_act_grad, .nin = 2, .in = {g.nodes[bn].out[0], g.nodes[dz].out[0]},
                                           .iattr = {acts[k % 3], 0}},
                               "act", &err);
        if (a >= 0)
            n = graph_add_node(&g, &(Node){.op = CT_OP_batch_norm_grad, .nin = 5,
                                           .in = {g.nodes[x].out[0], v[2], v[4], v[5], g.nodes[a].out[0]},
                                           .iattr = {1, 0}, .fattr = {1e-5}},
                               "bn", &err);
        CHECKF(n >= 0, "batch_norm, act_grad, batch_norm_grad: %s", err.msg);
        if (n >= 0) {
            char what[96];
            for (int o = 0; o < 3; o++)
                graph_mark_output(&g, g.nodes[n].out[o]);
            if (k == 3)
                graph_mark_output(&g, g.nodes[bn].out[0]);
            snprintf(what, sizeof what, "batch_norm + %s grad%s", op_def(acts[k % 3])->name,
                     k == 3 ? ", its output kept" : "");
            compare_run(what, &g, NULL, in, 8, TOL);
            Graph l; /* channels-last: dy a block of rows at a time */
            int laid = layout_channels_last(&g, &l, &err) == 0;
            CHECKF(laid, "%s: %s", what, err.msg);
            if (laid) {
                strcat(what, " channels_last");
                compare_run(what, &l, NULL, in, 8, TOL);
                graph_free(&l);
            }
        }
        for (int i = 0; i < 8; i++)
            free(in[i].data);
        graph_free(&g);
    }
}

/* Pooling, permutes, pads, softmax, layer norm and group norm with their
 * specialised paths (a max pool's vectorised interior columns and its
 * edges, a transposing permute's tiles) and sizes above the threshold where
 * the kernels split their work among threads. */
static void test_data_ops(void)
{
    static const OpCase cases[] = {
        {"max pool 3x3 s2 p1", CT_OP_max_pool2d, 1, {{4, {2, 10, 45, 41}}}, {3, 3, 2, 2, 1, 1, 0}, {0}},
        {"max pool 2x2 s2 ceil", CT_OP_max_pool2d, 1, {{4, {2, 3, 9, 11}}}, {2, 2, 2, 2, 0, 0, 1}, {0}},
        {"max pool 3x3 s1 p1", CT_OP_max_pool2d, 1, {{4, {1, 4, 8, 7}}}, {3, 3, 1, 1, 1, 1, 0}, {0}},
        {"max pool 3x2 s(2,3) p1 ceil", CT_OP_max_pool2d, 1, {{4, {2, 3, 10, 17}}}, {3, 2, 2, 3, 1, 1, 1}, {0}},
        {"avg pool 3x3 s2 p1", CT_OP_avg_pool2d, 1, {{4, {2, 10, 45, 41}}}, {3, 3, 2, 2, 1, 1, 0, 1}, {0}},
        {"avg pool 3x3 s2 p1 ceil no pad count", CT_OP_avg_pool2d, 1, {{4, {2, 3, 10, 9}}},
         {3, 3, 2, 2, 1, 1, 1, 0}, {0}},
        {"permute to channels last", CT_OP_permute, 1, {{4, {2, 24, 30, 33}}}, {4, 0, 2, 3, 1}, {0}},
        {"permute from channels last", CT_OP_permute, 1, {{4, {2, 30, 33, 24}}}, {4, 0, 3, 1, 2}, {0}},
        {"permute 2-D", CT_OP_permute, 1, {{2, {5, 7}}}, {2, 1, 0}, {0}},
        {"permute heads", CT_OP_permute, 1, {{4, {2, 5, 3, 8}}}, {4, 0, 2, 1, 3}, {0}},
        {"pad 0,1,0,1 (SAME's)", CT_OP_pad, 1, {{4, {2, 16, 57, 57}}}, {0, 1, 0, 1}, {0}},
        {"pad -2,3,1,-4 value -3", CT_OP_pad, 1, {{4, {2, 3, 9, 11}}}, {-2, 3, 1, -4}, {-3}},
        {"pad -5,6,1,1: no input row kept", CT_OP_pad, 1, {{4, {1, 2, 3, 4}}}, {-5, 6, 1, 1}, {0.5}},
        {"softmax last dim", CT_OP_softmax, 1, {{3, {4, 97, 101}}}, {2}, {0}},
        {"softmax dim 1", CT_OP_softmax, 1, {{3, {3, 50, 300}}}, {1}, {0}},
        {"layer norm", CT_OP_layer_norm, 3, {{3, {8, 100, 48}}, {1, {48}}, {1, {48}}}, {0}, {1e-6}},
        {"group norm 8 groups", CT_OP_group_norm, 3, {{4, {4, 32, 20, 20}}, {1, {32}}, {1, {32}}}, {8}, {1e-5}},
        {"group norm one image, one group", CT_OP_group_norm, 3, {{4, {1, 24, 40, 40}}, {1, {24}}, {1, {24}}}, {1},
         {1e-5}},
        {"group norm groups = C, 3-D", CT_OP_group_norm, 3, {{3, {3, 6, 10}}, {1, {6}}, {1, {6}}}, {6}, {1e-5}},
        /* weight standardisation: [1, out, fan_in], a group a channel */
        {"group norm no affine, groups = C", CT_OP_group_norm, 1, {{3, {1, 64, 147}}}, {64}, {1e-8}},
        {"group norm weight only, groups = C", CT_OP_group_norm, 2, {{3, {1, 48, 72}}, {1, {48}}}, {48}, {1e-5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_op(&cases[i]);
}

/* gather and its gradient (of dy = y * y) at an index with repeats and
 * entries outside [0, T): a bias table's [169, 6] rows at [49, 49] i32
 * (threads), LeViT's [2, 7] biases on dim 1 at i64, and the table in f16
 * (the index read as it is beside widened floats). */
static void test_gather(void)
{
    static const struct {
        const char *name;
        CtShape x, index;
        int dim;
        CtDType dt, idt;
        double tol;
    } cases[] = {{"gather a bias table", {2, {169, 6}}, {2, {49, 49}}, 0, CT_F32, CT_I32, TOL},
                 {"gather dim 1, i64", {2, {2, 7}}, {2, {5, 5}}, 1, CT_F32, CT_I64, TOL},
                 {"gather a bias table, f16", {2, {169, 6}}, {2, {49, 49}}, 0, CT_F16, CT_I32, 1e-3}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Graph g;
        CtErr err;
        uint32_t rng = 11;
        int64_t nx = shape_numel(&cases[i].x), K = shape_numel(&cases[i].index), T = cases[i].x.d[cases[i].dim];
        graph_init(&g);
        ValueId x = graph_add_value(&g, (CtType){cases[i].x, cases[i].dt}, CT_ROLE_INPUT, NULL);
        ValueId ix = graph_add_value(&g, (CtType){cases[i].index, cases[i].idt}, CT_ROLE_INPUT, NULL);
        float *xf = random_floats(nx, &rng);
        CtTensor in[2];
        tensor_alloc(&in[0], (CtType){cases[i].x, cases[i].dt});
        tensor_alloc(&in[1], (CtType){cases[i].index, cases[i].idt});
        elems_from_f32(xf, cases[i].dt, nx, in[0].data);
        for (int64_t k = 0; k < K; k++) { /* -1 .. T, mostly in range */
            int64_t t = (k * 7 + 3) % (T + 2) - 1;
            if (cases[i].idt == CT_I32)
                ((int32_t *)in[1].data)[k] = (int32_t)t;
            else
                ((int64_t *)in[1].data)[k] = t;
        }
        int a = graph_add_node(&g, &(Node){.op = CT_OP_gather, .nin = 2, .in = {x, ix}, .iattr = {cases[i].dim}},
                               cases[i].name, &err);
        CHECKF(a >= 0, "%s: %s", cases[i].name, err.msg);
        if (a >= 0) {
            ValueId y = g.nodes[a].out[0];
            ValueId dy = g.nodes[graph_add_node(&g, &(Node){.op = CT_OP_mul, .nin = 2, .in = {y, y}}, "dy", &err)]
                             .out[0];
            int b = graph_add_node(
                &g, &(Node){.op = CT_OP_gather_grad, .nin = 2, .in = {dy, ix}, .iattr = {cases[i].dim, T}},
                cases[i].name, &err);
            CHECKF(b >= 0, "%s: %s", cases[i].name, err.msg);
            graph_mark_output(&g, y);
            if (b >= 0)
                graph_mark_output(&g, g.nodes[b].out[0]);
            compare_run(cases[i].name, &g, NULL, in, 2, cases[i].tol);
        }
        free(xf);
        tensor_free(&in[0]);
        tensor_free(&in[1]);
        graph_free(&g);
    }
}

/* f16 nodes are refused up front, naming the node. */
static void test_refuses_f64(void)
{
    Graph g;
    CtErr err;
    graph_init(&g);
    ValueId x = graph_add_value(&g, (CtType){{1, {4}}, CT_F64}, CT_ROLE_INPUT, NULL);
    int id = graph_add_node(&g, &(Node){.op = CT_OP_relu, .nin = 1, .in = {x}}, "blocks.0.act", &err);
    graph_mark_output(&g, g.nodes[id].out[0]);
    CHECK(backend_check(cpu, &g, &err) != 0);
    CHECKF(strstr(err.msg, "cpu backend cannot run node 0 (relu at 'blocks.0.act')") != NULL, "%s", err.msg);
    graph_free(&g);
}

/* f16 and bf16 storage round trips: every f16 bit pattern, and the rounding
 * (to nearest even, overflow to infinity, subnormals) against the ref
 * backend's rounding of doubles. */
static void test_low_float_storage(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t in = (uint16_t)h, back;
        float f;
        elems_to_f32(&in, CT_F16, 1, &f);
        elems_from_f32(&f, CT_F16, 1, &back);
        bad += !isnan(f) && back != in;
    }
    CHECKF(bad == 0, "%d f16 values do not round-trip", bad);
    static const double xs[] = {1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 65504, 65519.99, 65520, 1e-7, 3e-8, 2.98e-8,
                                -0.1, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 3.3e38, 1e-39};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++)
        for (int b = 0; b < 2; b++) {
            CtDType dt = b ? CT_BF16 : CT_F16;
            double r = xs[i];
            float f = (float)xs[i], got;
            uint16_t bits;
            elems_round(&r, dt, 1);
            elems_from_f32(&f, dt, 1, &bits);
            elems_to_f32(&bits, dt, 1, &got);
            CHECKF(got == (float)r, "%s(%.9g): %.9g, ref rounds to %.9g", b ? "bf16" : "f16", xs[i], got, r);
        }
}

/* `model` under autocast on both backends: one training step (f16 with the
 * loss scale and the skip of a non-finite step, or bf16), or the eval
 * forward. The two backends round the same values to 11 (8) bits after
 * computing them in f32 and in doubles, so they agree to a few ulps of the
 * low precision, not to 1e-4. A training step of a BatchNorm net on the
 * vectors' tiny batch is chaotic under that rounding (each layer's batch
 * statistics amplify a one-ulp difference about 3x: 6e-6 after the first
 * conv, 2e-3 at the last block, 10% in the ReLU masks' gradients), so BN
 * nets are compared in eval, the ViT in training. */
static void test_amp(const char *model, int training, CtDType low, int channels_last, double tol)
{
    char what[128];
    CtErr err;
    Vectors v;
    if (vectors_open(&v, model, low == CT_F16 ? 1024 : 1))
        return;
    const ModelEntry *m = v.m;
    CtTensor *in = v.in;
    ModelSpec spec = {.batch_size = v.batch, .training = training, .args = v.args};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4, .no_weight_decay = m->no_weight_decay,
                     .skip_nonfinite = low == CT_F16};
    Graph g, a;
    TrainStep ts;
    CtState state;
    int built = model_build(m, &spec, &g, &err) == 0 && amp_cast(&g, low, &a, &err) == 0;
    graph_free(&g);
    if (built && channels_last) {
        built = layout_channels_last(&a, &g, &err) == 0;
        graph_free(&a);
        a = g;
    }
    CHECKF(built, "%s: %s", model, err.msg);
    if (!built) {
        st_free(&v.f);
        return;
    }
    if (!training ||
        train_step_build(&a, a.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1}, &sgd, &ts, &err) == 0) {
        state_create(&state, &a);
        CHECKF(state_load(&state, &v.f, "state.", &err) == 0, "%s: %s", model, err.msg);
        snprintf(what, sizeof what, "%s amp %s %s%s", model, low == CT_F16 ? "f16" : "bf16",
                 training ? "sgd step" : "eval", channels_last ? " channels_last" : "");
        compare_run(what, &a, &state, in, training ? 4 : 1, tol);
        state_free(&state);
        if (training)
            train_step_free(&ts);
    } else {
        CHECKF(0, "%s: %s", model, err.msg);
    }
    graph_free(&a);
    st_free(&v.f);
}

/* One SGD step of `model` (timm's initialisation, random inputs, at 64 px)
 * through the layout pass, stored NHWC on the cpu backend: its ops that
 * the four vectors' models do not reach (group norm, the attention
 * blocks' pads and pooling, scaled weight standardisation, ...) in
 * channels-last storage, as the ref backend computes them row-major. */
static void test_channels_last(const char *model)
{
    char what[128];
    CtErr err;
    const ModelEntry *m = model_find(model);
    CHECKF(m != NULL, "no model %s", model);
    if (!m)
        return;
    ModelArgs args = model_args_default();
    args.img_size = 64;
    args.num_classes = 10;
    ModelSpec spec = {.batch_size = 2, .training = 1, .args = args};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4, .no_weight_decay = m->no_weight_decay};
    Graph g, l;
    TrainStep ts;
    LossSpec xent = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1};
    if (model_build(m, &spec, &g, &err)) {
        CHECKF(0, "%s: %s", model, err.msg);
        return;
    }
    int ok = train_step_build(&g, g.outputs[0], &xent, &sgd, &ts, &err) == 0;
    if (ok)
        train_step_free(&ts);
    ok = ok && layout_channels_last(&g, &l, &err) == 0;
    CHECKF(ok, "%s: %s", model, err.msg);
    graph_free(&g);
    if (!ok)
        return;
    int64_t nx = 2 * 3 * 64 * 64;
    uint32_t rng = 7;
    float *x = random_floats(nx, &rng), lr = 0.1f, scale = 1.f;
    int64_t target[2] = {3, 8};
    CtTensor in[4] = {{{shape_make(4, (int64_t[]){2, 3, 64, 64}), CT_F32}, x},
                      {{shape_make(1, (int64_t[]){2}), CT_I64}, target},
                      {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    CtState state;
    state_create(&state, &l);
    state_init(&state, 1);
    snprintf(what, sizeof what, "%s sgd step channels_last", model);
    compare_run(what, &l, &state, in, 4, TOL);
    state_free(&state);
    free(x);
    graph_free(&l);
}

/* --convs: the GEMM ops' cases and the f32 model runs only, the parts a
 * CTIMM_CONV setting changes (tests/CMakeLists.txt runs them per setting). */
int main(int argc, char **argv)
{
    int convs_only = argc > 1 && !strcmp(argv[1], "--convs");
    cpu = backend_find("cpu");
    ref = backend_find("ref");
    CHECK(cpu != NULL && ref != NULL);
    if (!cpu || !ref)
        return check_done("test_cpu");
    if (!convs_only) {
        test_refuses_f64();
        test_low_float_storage();
    }
    test_gemm_ops();
    test_stem_act();
    if (!convs_only) {
        test_bn_act_grad();
        test_data_ops();
        test_gather();
    }
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        test_model(models[i], strcmp(models[i], "test_vit") != 0);
    static const char *const nhwc_models[] = {"test_efficientnet_gn", "test_byobnet", "test_maxvit", "test_nfnet"};
    for (size_t i = 0; i < sizeof nhwc_models / sizeof nhwc_models[0]; i++)
        test_channels_last(nhwc_models[i]);
    for (size_t i = 0; i < sizeof models / sizeof models[0] && !convs_only; i++) {
        int training = !strcmp(models[i], "test_vit");
        test_amp(models[i], training, CT_F16, 0, 2e-3);
        test_amp(models[i], training, CT_BF16, 0, 1.5e-2);
        if (!training) /* f16 storage through the transposes and batch norm's own NHWC form */
            test_amp(models[i], 0, CT_F16, 1, 2e-3);
    }
    return check_done("test_cpu");
}
