/* The cuda backend's programs on the host (--backend cuda-sim: the SIMT
 * harness for the kernels, the library calls from their descriptors)
 * against the ref backend, on the test models' reference vectors: every
 * output, gradient and updated state tensor of an SGD step within 1e-4
 * relative in f32 (NCHW, and channels_last for the conv nets), the AMP
 * graphs within 2e-2 (bf16 training of test_vit, and f16 with the loss
 * scale and GradScaler's skip of a non-finite step, f16 eval of the conv nets
 * in channels_last, test_efficientnet's also with its batch norms folded
 * (depthwise convolutions storing their SiLU): a BN net's AMP step is
 * chaotic on the vectors' tiny batch, tests/test_cpu.c says why); a second
 * run with another thread order gives the same bits (the kernels have no
 * races); a step after the first moves only its inputs and outputs, no
 * state. Together these run
 * every kind of step the launch plan makes: generated kernels, library
 * kernels of every family, GEMMs with epilogues, the three convolution
 * directions in both formats and the NHWC filter copies; and the training
 * step as ctimm-train compiles it, from the uint8 batch (RGB and gray) with
 * random erasing and mixup in the graph; attention with a bias on the
 * scores; batch norms trained with remat, whose gradients the plan runs
 * with their activations' (lib_bn_act_grad), test_efficientnet's with its
 * squeeze-excitation's gradient (lib_bn_excite_grad) and its squeeze's
 * pool in the batch norm's pass (lib_bn_pool_fits); the depthwise
 * convolutions of test_efficientnet's and test_convnext's channels-last
 * f32 steps again as their cuDNN twins (CTIMM_DWCONV=cudnn); linear layers' bias
 * gradients summed in their weight gradients' GEMMs (BGRADB), test_vit's
 * residual adds in the norms after them under AMP. (ctimm-run
 * --backend cuda-sim against timm's own numbers: tests/cli_tests.cmake.) */
#include <math.h>
#include <string.h>

#include "check.h"
#include "codegen/cuda/launch_plan.h"
#include "codegen/program.h"
#include "frontend/builder.h"
#include "model_vectors.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "runtime/cuda_sim/backend_sim.h"
#include "uint8_step.h"

typedef struct Run {
    CtState s;
    CtTensor *out;
    int ok;
} Run;

/* A step from init on be, its outputs and the state after it in r; with
 * `again`, a second step (from the state the first left, state given back
 * between them) checked to move no state: what moves is the plan's, the
 * same in every thread order, so one run of a graph checks it. */
static void run(const CtBackend *be, const char *what, const Graph *g, const CtState *init, const CtTensor *in,
                int nin, uint64_t seed, int again, Run *r)
{
    CtErr err;
    CtRunner rr;
    state_create(&r->s, g);
    memcpy(r->s.data, init->data, init->nbytes);
    r->out = calloc((size_t)g->noutputs + 1, sizeof *r->out);
    int rc = backend_open(&rr, be, g, &r->s, &(ProgramOptions){.sim_seed = seed}, &err);
    if (rc == 0)
        rc = backend_step(&rr, in, nin, r->out, &err);
    if (rc == 0)
        rc = be->state_to_host(rr.exec, &err);
    if (rc == 0 && again) {
        CtTensor *out2 = calloc((size_t)g->noutputs + 1, sizeof *out2);
        size_t moved[3];
        if ((rc = backend_step(&rr, in, nin, out2, &err)) == 0) {
            cuda_sim_moved(rr.exec, &moved[0], &moved[1], &moved[2]);
            CHECKF(moved[2] == 0 && moved[0] > 0, "%s: a second step moved %zu bytes of state", what, moved[2]);
            for (int k = 0; k < g->noutputs; k++)
                tensor_free(&out2[k]);
        }
        free(out2);
    }
    backend_close(&rr);
    CHECKF(rc == 0, "%s on %s: %s", what, be->name, err.msg);
    r->ok = rc == 0;
}

static void run_free(const Graph *g, Run *r)
{
    for (int k = 0; r->ok && k < g->noutputs; k++)
        tensor_free(&r->out[k]);
    free(r->out);
    state_free(&r->s);
}

/* The worst relative error of a's outputs and f32 state against b's;
 * exact: every byte the same. */
static double compare(const char *what, const Graph *g, const Run *a, const Run *b, double tol, int exact)
{
    double worst = 0;
    for (int k = 0; k < g->noutputs; k++) {
        const CtType *t = &g->values[g->outputs[k]].type;
        int64_t n = shape_numel(&t->shape);
        if (exact) {
            CHECKF(!memcmp(a->out[k].data, b->out[k].data, (size_t)n * ct_dtype_size(t->dtype)),
                   "%s: output %d differs between thread orders", what, k);
            continue;
        }
        if (!ct_dtype_is_float(t->dtype))
            continue;
        float *w[2] = {malloc(sizeof(float) * (size_t)(n + 1)), malloc(sizeof(float) * (size_t)(n + 1))};
        CT_ASSERT(w[0] && w[1]);
        elems_to_f32(a->out[k].data, t->dtype, n, w[0]);
        elems_to_f32(b->out[k].data, t->dtype, n, w[1]);
        double e = rel_err(w[0], w[1], n);
        CHECKF(e <= tol, "%s: output %d: %.3e", what, k, e);
        worst = e > worst ? e : worst;
        free(w[0]);
        free(w[1]);
    }
    if (exact) {
        CHECKF(!memcmp(a->s.data, b->s.data, a->s.nbytes), "%s: the state differs between thread orders", what);
        return 0;
    }
    for (int i = 0; i < a->s.n; i++) {
        if (a->s.e[i].type.dtype != CT_F32)
            continue;
        double e = rel_err(state_data(&a->s, i), state_data(&b->s, i), shape_numel(&a->s.e[i].type.shape));
        CHECKF(e <= tol, "%s: state '%s': %.3e", what, a->s.e[i].name, e);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* g from init on ref and on cuda-sim in two thread orders: the first within
 * tol of ref, the second the same bits. */
static void check_graph(const char *what, const Graph *g, const CtState *init, const CtTensor *in, int nin,
                        double tol)
{
    Run ref, sim, other;
    run(&ct_backend_ref, what, g, init, in, nin, 0, 0, &ref);
    run(&ct_backend_cuda_sim, what, g, init, in, nin, 1, 1, &sim);
    run(&ct_backend_cuda_sim, what, g, init, in, nin, 77, 0, &other);
    if (ref.ok && sim.ok && other.ok) {
        double e = compare(what, g, &sim, &ref, tol, 0);
        compare(what, g, &other, &sim, 0, 1);
        printf("%s: cuda-sim vs ref %.2e\n", what, e);
    }
    run_free(g, &ref);
    run_free(g, &sim);
    run_free(g, &other);
}

/* g's depthwise convolutions run as their cuDNN twins (CTIMM_DWCONV=cudnn):
 * within tol of ref, and not the library kernels' bits (their sums are
 * float, the twin's call double: a harness that ran the kernels instead
 * would give the same bits). */
static void check_twins(const char *what, const Graph *g, const CtState *init, const CtTensor *in, int nin,
                        double tol)
{
    Run ref, lib, twin;
    run(&ct_backend_ref, what, g, init, in, nin, 0, 0, &ref);
    run(&ct_backend_cuda_sim, what, g, init, in, nin, 1, 0, &lib);
    setenv("CTIMM_DWCONV", "cudnn", 1);
    run(&ct_backend_cuda_sim, what, g, init, in, nin, 1, 0, &twin);
    unsetenv("CTIMM_DWCONV");
    if (ref.ok && lib.ok && twin.ok) {
        double e = compare(what, g, &twin, &ref, tol, 0);
        int same = !memcmp(lib.s.data, twin.s.data, lib.s.nbytes);
        for (int k = 0; k < g->noutputs; k++)
            same &= !memcmp(lib.out[k].data, twin.out[k].data, value_bytes(&g->values[g->outputs[k]]));
        CHECKF(!same, "%s: the twins gave the library kernels' bits", what);
        printf("%s, depthwise convolutions on their cuDNN twins: cuda-sim vs ref %.2e\n", what, e);
    }
    run_free(g, &ref);
    run_free(g, &lib);
    run_free(g, &twin);
}

static void check_model(const char *model, CtDType low, int channels_last, int training, int remat, int fold,
                        int twins)
{
    Vectors v;
    CtErr err;
    if (vectors_open(&v, model, low == CT_F16 ? 1024 : 1))
        return;
    ModelSpec spec = {.batch_size = v.batch, .training = training, .args = v.args};
    Pipeline p = {.training = training, .loss = {CT_LOSS_CROSS_ENTROPY, 0.1, -1, 0},
                  .opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4,
                          .no_weight_decay = v.m->no_weight_decay, .skip_nonfinite = low == CT_F16},
                  .amp = low != CT_F32, .amp_dtype = low, .channels_last = channels_last,
                  .remat = {.cheap = remat}, .bn_fold = fold, .verify = 1};
    Graph g;
    if (model_build(v.m, &spec, &g, &err) || pipeline_run(&p, &g, NULL, &err)) {
        CHECKF(0, "%s: %s", model, err.msg);
        st_free(&v.f);
        return;
    }
    CtState init;
    char what[160];
    state_create(&init, &g);
    CHECKF(state_load(&init, &v.f, "state.", &err) == 0, "%s: %s", model, err.msg);
    snprintf(what, sizeof what, "%s %s %s%s%s%s", model, training ? "sgd step" : "eval",
             low == CT_F32 ? "f32" : low == CT_F16 ? "amp f16" : "amp bf16", channels_last ? " channels_last" : "",
             remat ? " remat" : "", fold ? " batch norms folded" : "");
    check_graph(what, &g, &init, v.in, training ? 4 : 1, low == CT_F32 ? 1e-4 : 2e-2);
    if (twins)
        check_twins(what, &g, &init, v.in, training ? 4 : 1, low == CT_F32 ? 1e-4 : 2e-2);
    state_free(&init);
    graph_free(&g);
    st_free(&v.f);
}

/* A registry model with no reference vectors, from its seeded init and a
 * drawn batch: test_maxvit in channels-last, whose attention operands of
 * one head ([B, 1, N, D], the same bytes in either layout) keep the
 * channels-last flag the layout pass left them. */
static void check_seeded(const char *model, CtDType low, int channels_last, int training)
{
    enum { B = 2 };
    CtErr err;
    const ModelEntry *m = model_find(model);
    ModelArgs args = model_args_default();
    args.num_classes = 5;
    ModelSpec spec = {.batch_size = B, .training = training, .args = args};
    Pipeline p = {.training = training, .loss = {CT_LOSS_CROSS_ENTROPY, 0.1, -1, 0},
                  .opt = {.kind = CT_OPT_SGD, .momentum = 0.9}, .amp = low != CT_F32, .amp_dtype = low,
                  .channels_last = channels_last, .verify = 1};
    Graph g;
    if (!m || model_build(m, &spec, &g, &err) || pipeline_run(&p, &g, NULL, &err)) {
        CHECKF(0, "%s: %s", model, m ? err.msg : "not in the registry");
        return;
    }
    const Value *x = &g.values[0];
    int64_t n = shape_numel(&x->type.shape);
    float *img = malloc(sizeof(float) * (size_t)n), lr = 0.1f, scale = 1;
    static int64_t target[B] = {1, 3};
    CT_ASSERT(img != NULL);
    for (int64_t i = 0; i < n; i++)
        img[i] = (float)sin(0.37 * (double)i);
    CtTensor in[4] = {{x->type, img}, {{{1, {B}}, CT_I64}, target}, {{{0}, CT_F32}, &lr}, {{{0}, CT_F32}, &scale}};
    CtState init;
    state_create(&init, &g);
    state_init(&init, 3);
    char what[160];
    snprintf(what, sizeof what, "%s %s %s%s (seeded)", model, training ? "sgd step" : "eval",
             low == CT_F32 ? "f32" : "amp", channels_last ? " channels_last" : "");
    check_graph(what, &g, &init, in, training ? 4 : 1, low == CT_F32 ? 1e-4 : 2e-2);
    state_free(&init);
    graph_free(&g);
    free(img);
}

/* A small net's body, from the input [2, 3, 8, 8] to 8 channels; index:
 * the i32 [16, 16] graph input of the nets that gather (-1 in the others). */
typedef ValueId (*NetBody)(Builder *b, ValueId x, ValueId index);

/* timm's GroupNorm nets (resnet50_gn, BiT) in miniature: a StdConv2d (its
 * weight a group_norm without affine), group norm of two-channel groups,
 * relu, a ScaledStdConv2d (its weight's group_norm with the gain as
 * weight), group norm of one group. Groups of 128 and 512 values: threads
 * of a block idle, and take several values each. */
static ValueId group_norm_body(Builder *b, ValueId h, ValueId index)
{
    h = nn_std_conv2d(b, "conv1", h, 8, 3, (ConvOpts){.padding = 1}, (StdConvOpts){.eps = 1e-8});
    h = f_relu(b, nn_group_norm(b, "gn1", h, (GNOpts){.groups = 4}));
    h = nn_std_conv2d(b, "conv2", h, 8, 3, (ConvOpts){.padding = 1, .bias = 1},
                      (StdConvOpts){.eps = 1e-5, .scaled = 1, .gamma = 1.7, .gain_init = 0.7});
    return nn_group_norm(b, "gn2", h, (GNOpts){.groups = 1});
}

/* A ResNet block in miniature: conv, batch norm and relu, then conv and
 * batch norm added to the block's input (a 1x1 conv of it). Under amp the
 * norms run in the convolutions' dtype with f32 weights and statistics,
 * forward and backward. */
static ValueId batch_norm_body(Builder *b, ValueId h, ValueId index)
{
    ValueId s = nn_conv2d(b, "down", h, 8, 1, (ConvOpts){0});
    h = f_relu(b, nn_batch_norm(b, "bn1", nn_conv2d(b, "conv1", h, 8, 3, (ConvOpts){.padding = 1}), (BNOpts){0}));
    h = nn_batch_norm(b, "bn2", nn_conv2d(b, "conv2", h, 8, 3, (ConvOpts){.padding = 1}), (BNOpts){0});
    return f_relu(b, f_add(b, h, s));
}

/* EfficientNet's conv, batch norm and SiLU, a ResNet's conv, batch norm
 * and ReLU, then a 1x1 conv, batch norm and GELU, trained with the cheap
 * activations recomputed (remat), as ctimm-train does: each norm with its
 * activation recomputed in the backward, whose act_grad only its
 * batch_norm_grad reads, so that the launch plan runs the SiLU's three
 * steps as one (lib_bn_act_grad), the GELU's with the head's pool gradient
 * before them (lib_bn_excite_grad), and the ReLU's three too: its output
 * is conv3's input, whose weight gradient comes after them
 * (passes/schedule.h's schedule_bn_reruns), so that the gradient's pass
 * stores it. */
static ValueId bn_act_body(Builder *b, ValueId h, ValueId index)
{
    h = f_silu(b, nn_batch_norm(b, "bn1", nn_conv2d(b, "conv1", h, 8, 3, (ConvOpts){.padding = 1}), (BNOpts){0}));
    h = f_relu(b, nn_batch_norm(b, "bn2", nn_conv2d(b, "conv2", h, 8, 3, (ConvOpts){.padding = 1}), (BNOpts){0}));
    return f_gelu(b, nn_batch_norm(b, "bn3", nn_conv2d(b, "conv3", h, 8, 1, (ConvOpts){0}), (BNOpts){0}), 0);
}

/* EfficientNet's conv, batch norm and SiLU, then its squeeze-excitation
 * (the mean over the map, 1x1 convs with biases, SiLU, sigmoid) scaling
 * it, trained with remat: the excitation's gradient, read only by the
 * SiLU's, runs in the batch norm gradient after it (lib_bn_excite_grad). */
static ValueId excite_body(Builder *b, ValueId h, ValueId index)
{
    h = f_silu(b, nn_batch_norm(b, "bn1", nn_conv2d(b, "conv1", h, 16, 3, (ConvOpts){.padding = 1}), (BNOpts){0}));
    ValueId s = f_adaptive_avg_pool2d(b, h, 1, 1);
    s = f_silu(b, nn_conv2d(b, "se_reduce", s, 4, 1, (ConvOpts){.bias = 1}));
    s = f_sigmoid(b, nn_conv2d(b, "se_expand", s, 16, 1, (ConvOpts){.bias = 1}));
    return nn_batch_norm(b, "bn2", nn_conv2d(b, "conv2", f_mul(b, h, s), 8, 1, (ConvOpts){0}), (BNOpts){0});
}

/* timm's pad_same: a stride-2 conv after padding 0,1,0,1 (8x8 -> 4x4), a
 * max pool after -inf padding (4x4 -> 2x2), a conv after uneven padding
 * (-> 3x3) and a crop (-> 2x2); their gradients are crops and pads. */
static ValueId pad_body(Builder *b, ValueId h, ValueId index)
{
    h = f_relu(b, nn_conv2d(b, "conv1", f_pad(b, h, 0, 1, 0, 1, 0), 8, 3, (ConvOpts){.stride = 2}));
    h = f_max_pool2d(b, f_pad(b, h, 0, 1, 0, 1, -INFINITY), 3, 2, 0);
    h = nn_conv2d(b, "conv2", f_pad(b, h, 1, 2, 2, 1, 0), 8, 3, (ConvOpts){0});
    return f_pad(b, h, -1, 0, 0, -1, 0);
}

/* Swin's window attention in miniature: a 4x4 window of 8 channels, two
 * heads, whose scores get the relative position bias [1, H, N, N], a table
 * [49, 2] gathered at the window's relative position index (the graph
 * input: each entry taken by up to 16 pairs, so its gradient sums them). */
static ValueId gather_body(Builder *b, ValueId h, ValueId index)
{
    h = nn_conv2d(b, "conv1", h, 8, 3, (ConvOpts){.stride = 2, .padding = 1}); /* [2, 8, 4, 4] */
    ValueId t = f_permute(b, f_reshape(b, h, 4, (int64_t[]){2, 2, 4, 16}), 4, (int64_t[]){0, 1, 3, 2});
    ValueId table = b_param(b, "table", (CtShape){2, {49, 2}}, init_trunc_normal(0.5));
    ValueId bias = f_permute(b, f_gather(b, table, 0, index), 3, (int64_t[]){2, 0, 1}); /* [2 heads, 16, 16] */
    bias = f_reshape(b, bias, 4, (int64_t[]){1, 2, 16, 16});
    ValueId o = f_permute(b, f_sdpa_bias(b, t, t, t, bias, 0.5), 4, (int64_t[]){0, 1, 3, 2}); /* [2, 2, 4, 16] */
    return f_reshape(b, o, 4, (int64_t[]){2, 8, 4, 4});
}

/* Attention over the 8x8 map's 1x1-conv projections viewed [B, 2 heads,
 * 16, 16], with an additive bias computed from the input [B, 1, N, M] (a
 * mask: its gradient summed over the heads, through a conv). */
static ValueId mask_body(Builder *b, ValueId h, ValueId index)
{
    static const int64_t heads[] = {2, 2, 16, 16};
    ValueId qkv[3];
    for (int i = 0; i < 3; i++)
        qkv[i] = f_reshape(b, nn_conv2d(b, i == 0 ? "q" : i == 1 ? "k" : "v", h, 8, 1, (ConvOpts){0}), 4, heads);
    ValueId bias = f_reshape(b, nn_conv2d(b, "mask", h, 4, 1, (ConvOpts){0}), 4, (int64_t[]){2, 1, 16, 16});
    ValueId y = f_sdpa_bias(b, qkv[0], qkv[1], qkv[2], bias, 0.25);
    return f_reshape(b, y, 4, (int64_t[]){2, 8, 8, 8});
}

/* The packed form: one 1x1-conv projection viewed qkv [B, 16 tokens, 3,
 * 2 heads, 16], with mask_body's bias; y [B, 16, 2, 16] back to a map. */
static ValueId packed_body(Builder *b, ValueId h, ValueId index)
{
    ValueId qkv = f_reshape(b, nn_conv2d(b, "qkv", h, 24, 1, (ConvOpts){0}), 5, (int64_t[]){2, 16, 3, 2, 16});
    ValueId bias = f_reshape(b, nn_conv2d(b, "mask", h, 4, 1, (ConvOpts){0}), 4, (int64_t[]){2, 1, 16, 16});
    return f_reshape(b, f_sdpa_qkv(b, qkv, bias, 0.25), 4, (int64_t[]){2, 8, 8, 8});
}

/* body, a global pool and a linear layer: an SGD step on cuda-sim against
 * ref, f32 in NCHW and channels_last and under AMP (f16 channels_last with
 * the loss scale, bf16; group norm runs in f32). The norms' weights and
 * biases drawn away from 1 and 0, so a weight read for the wrong channel
 * shows. */
static void check_net(const char *name, NetBody body, int gathers, const int *remat, CtDType low, int channels_last,
                      const char *opt)
{
    enum { B = 2, S = 8, CLASSES = 5, N = 16 };
    Graph g;
    Builder b;
    CtErr err;
    graph_init(&g);
    b_init(&b, &g, 1);
    ValueId h = b_input(&b, "input", (CtShape){4, {B, 3, S, S}}, CT_F32);
    h = body(&b, h, gathers ? b_input(&b, "index", (CtShape){2, {N, N}}, CT_I32) : -1);
    h = nn_linear(&b, "fc", f_global_avg_pool(&b, h), CLASSES, (LinearOpts){0});
    if (h >= 0)
        graph_mark_output(&g, h);
    Pipeline p = {.training = 1, .loss = {CT_LOSS_CROSS_ENTROPY, 0.1, -1, 0}, .amp = low != CT_F32,
                  .amp_dtype = low, .channels_last = channels_last, .remat = {.cheap = remat != NULL}, .verify = 1};
    CT_ASSERT(optim_defaults(opt, &p.opt) == 0);
    p.opt.skip_nonfinite = low == CT_F16;
    p.opt.weight_decay = strcmp(opt, "sgd") ? 0.01 : 0; /* LAMB's and LARS's trust ratios need it */
    p.opt.max_lr = 0.2; /* corrected weight decay's: not the step's lr 0.1, so lr^2 / max_lr is not lr */
    if (b_finish(&b, &err) || pipeline_run(&p, &g, NULL, &err)) {
        CHECKF(0, "%s: %s", name, err.msg);
        graph_free(&g);
        return;
    }
    static float x[B * 3 * S * S];
    static int64_t target[B] = {1, 3};
    static int32_t index[N * N];
    float lr = 0.1f, scale = low == CT_F16 ? 1024 : 1;
    for (int i = 0; i < B * 3 * S * S; i++)
        x[i] = (float)sin(0.37 * i);
    for (int i = 0; i < N * N; i++) /* timm's relative_position_index of a 4x4 window */
        index[i] = (i / N / 4 - i % N / 4 + 3) * 7 + (i / N % 4 - i % N % 4 + 3);
    CtTensor in[5] = {{{{4, {B, 3, S, S}}, CT_F32}, x}, {{{2, {N, N}}, CT_I32}, index}, {{{1, {B}}, CT_I64}, target},
                      {{{0}, CT_F32}, &lr}, {{{0}, CT_F32}, &scale}};
    if (!gathers) /* no index among the inputs */
        memmove(&in[1], &in[2], 3 * sizeof *in);
    CtState init;
    state_create(&init, &g);
    state_init(&init, 3);
    for (int j = 0; j < init.n; j++)
        if (!strncmp(init.e[j].name, "gn", 2))
            for (int64_t i = 0; i < shape_numel(&init.e[j].type.shape); i++)
                ((float *)state_data(&init, j))[i] += (float)(0.3 * sin(1.7 * (double)(i + 5 * j)));
    char what[96];
    snprintf(what, sizeof what, "%s %s step %s%s", name, opt,
             low == CT_F32 ? "f32" : low == CT_F16 ? "amp f16" : "amp bf16", channels_last ? " channels_last" : "");
    LaunchPlan lp;
    int spans[4] = {0}, bias_grads = 0, stats_convs = 0;
    if (launch_plan(&g, PROGRAM_CUDA_SMS, &lp, &err) == 0) {
        for (int s = 0; s < lp.nsteps; s++) {
            bias_grads += lp.steps[s].kind == LP_GEMM && lp.steps[s].gemm.epi.bgrad >= 0;
            stats_convs += lp.steps[s].kind == LP_CONV && lp.steps[s].conv.stats >= 0;
            const LpStep *st = &lp.steps[s]; /* the input's cast and layout change aside */
            spans[st->span] += st->kind == LP_LIB && !(st->nlib && !strncmp(st->lib[0].kernel, "ct_copy_cast", 12));
        }
        launch_plan_free(&lp);
    }
    CHECKF(bias_grads == 1, "%s: %d bias gradients in the GEMM epilogue (not fc's)", what, bias_grads);
    CHECKF(!remat || (spans[1] == remat[0] && spans[2] == remat[1] && spans[3] == remat[2]),
           "%s: %d library steps spanning 1 more (not %d), %d spanning 2 (norms run again with their activations' "
           "gradients; not %d), %d spanning 3 (and an excitation's gradient; not %d)",
           what, spans[1], remat ? remat[0] : 0, spans[2], remat ? remat[1] : 0, spans[3], remat ? remat[2] : 0);
    /* a batch norm after its convolution in 16-bit channels-last: its statistics from the sums the
     * convolution's step makes, by the call (the cuda-sim's cuDNN makes GenStats' outputs) and, with
     * CTIMM_CONV_STATS=kernel, by the statistics pass after it */
    int bn_net = body == batch_norm_body || body == bn_act_body || body == excite_body;
    CHECKF((stats_convs > 0) == (bn_net && low != CT_F32 && channels_last), "%s: %d convolutions making sums", what,
           stats_convs);
    check_graph(what, &g, &init, in, gathers ? 5 : 4, low == CT_F32 ? 1e-4 : 2e-2);
    if (stats_convs) {
        char pass[128];
        snprintf(pass, sizeof pass, "%s, sums by the statistics pass", what);
        setenv("CTIMM_CONV_STATS", "kernel", 1);
        check_graph(pass, &g, &init, in, gathers ? 5 : 4, 2e-2);
        unsetenv("CTIMM_CONV_STATS");
    }
    state_free(&init);
    graph_free(&g);
}

/* Generated kernels over more elements than the grid has threads: each
 * thread's main part takes several elements at a time, all their loads
 * before their stores (codegen/render_cuda.c), the rest one at a time; a
 * contiguous view, a broadcast one and a store rounded to bf16. */
static void check_long_loop(void)
{
    enum { R = 1031, C = 1033 }; /* past 1 << 20, in no whole number of groups */
    Graph g;
    Builder b;
    CtErr err;
    graph_init(&g);
    b_init(&b, &g, 0);
    ValueId x = b_input(&b, "x", (CtShape){2, {R, C}}, CT_F32), row = b_input(&b, "row", (CtShape){1, {C}}, CT_F32);
    ValueId y = f_add(&b, f_relu(&b, f_add(&b, x, row)), f_scale_shift(&b, x, 0.5, 1));
    ValueId low = b_node(&b, CT_OP_cast, 1, &y, (int64_t[]){CT_BF16}, 1, NULL, 0, 0);
    graph_mark_output(&g, y);
    graph_mark_output(&g, low);
    Pipeline p = {.verify = 1};
    if (b_finish(&b, &err) || pipeline_run(&p, &g, NULL, &err)) {
        CHECKF(0, "long loop: %s", err.msg);
        graph_free(&g);
        return;
    }
    static float xs[R * C], rs[C];
    for (int i = 0; i < R * C; i++)
        xs[i] = (float)sin(0.013 * i);
    for (int i = 0; i < C; i++)
        rs[i] = (float)cos(0.7 * i);
    CtTensor in[2] = {{{{2, {R, C}}, CT_F32}, xs}, {{{1, {C}}, CT_F32}, rs}};
    CtState init;
    state_create(&init, &g);
    check_graph("a loop of 1.07 M elements", &g, &init, in, 2, 1e-6);
    state_free(&init);
    graph_free(&g);
}

/* A long loop of 16-bit and byte operands: chunks of eight elements in
 * 16- and 8-byte accesses (codegen/render_cuda.c's vector part): a bf16
 * tensor, a bf16 row broadcast down it (read in vectors too), an f32 column
 * (read once a chunk), a uint8 mask; bf16 and f16 stores. */
static void check_vector_loop(void)
{
    enum { R = 1021, C = 1032 }; /* past 1 << 20; rows of whole chunks */
    Graph g;
    Builder b;
    CtErr err;
    graph_init(&g);
    b_init(&b, &g, 0);
    ValueId x = b_input(&b, "x", (CtShape){2, {R, C}}, CT_BF16), row = b_input(&b, "row", (CtShape){1, {C}}, CT_BF16);
    ValueId col = b_input(&b, "col", (CtShape){2, {R, 1}}, CT_F32), m = b_input(&b, "m", (CtShape){2, {R, C}}, CT_U8);
    ValueId xr = b_node(&b, CT_OP_cast, 1, (ValueId[]){f_mul(&b, x, row)}, (int64_t[]){CT_F32}, 1, NULL, 0, 0);
    ValueId mf = b_node(&b, CT_OP_cast, 1, &m, (int64_t[]){CT_F32}, 1, NULL, 0, 0);
    ValueId y = f_add(&b, f_add(&b, xr, col), f_scale_shift(&b, mf, 0.5, 0));
    graph_mark_output(&g, b_node(&b, CT_OP_cast, 1, &y, (int64_t[]){CT_BF16}, 1, NULL, 0, 0));
    graph_mark_output(&g, b_node(&b, CT_OP_cast, 1, &y, (int64_t[]){CT_F16}, 1, NULL, 0, 0));
    Pipeline p = {.verify = 1};
    if (b_finish(&b, &err) || pipeline_run(&p, &g, NULL, &err)) {
        CHECKF(0, "vector loop: %s", err.msg);
        graph_free(&g);
        return;
    }
    static float xf[R * C], rf[C], cs[R];
    static uint16_t xs[R * C], rs[C];
    static uint8_t ms[R * C];
    for (int i = 0; i < R * C; i++) {
        xf[i] = (float)sin(0.9 * i);
        ms[i] = (uint8_t)(i * 7 % 251);
    }
    for (int i = 0; i < C; i++)
        rf[i] = (float)cos(0.7 * i);
    for (int i = 0; i < R; i++)
        cs[i] = (float)(0.01 * i);
    elems_from_f32(xf, CT_BF16, R * C, xs);
    elems_from_f32(rf, CT_BF16, C, rs);
    CtTensor in[4] = {{{{2, {R, C}}, CT_BF16}, xs}, {{{1, {C}}, CT_BF16}, rs}, {{{2, {R, 1}}, CT_F32}, cs},
                      {{{2, {R, C}}, CT_U8}, ms}};
    CtState init;
    state_create(&init, &g);
    check_graph("a loop of 1.05 M 16-bit elements", &g, &init, in, 4, 1e-4);
    state_free(&init);
    graph_free(&g);
}

/* The training step as ctimm-train compiles it: the loader's uint8 batch
 * (RGB, or --in-chans 1's gray one) normalised, erased ('pixel', up to a
 * box an image) and mixed in the graph, channels-last, against ref; and a
 * step moving in only those inputs. */
static void check_uint8_step(int chans)
{
    static Uint8Step u;
    if (uint8_step_open(&u, chans))
        return;
    const char *what = chans == 1 ? "test_resnet gray uint8 step (in_chans 1, erase, mix, channels_last)"
                                  : "test_resnet uint8 step (erase, mix, channels_last)";
    Run ref, sim;
    run(&ct_backend_ref, what, &u.g, &u.init, u.in, 6, 0, 0, &ref);
    run(&ct_backend_cuda_sim, what, &u.g, &u.init, u.in, 6, 5, 1, &sim);
    if (ref.ok && sim.ok)
        printf("%s: cuda-sim vs ref %.2e\n", what, compare(what, &u.g, &sim, &ref, 1e-4, 0));
    run_free(&u.g, &ref);
    run_free(&u.g, &sim);
    uint8_step_free(&u);
}

int main(void)
{
    /* The sanitizer build runs each graph once, f32 (plus the channels-last
     * f16 eval of test_resnet): the harness and launches are ctimm's code there,
     * the precisions' and layouts' kernels this build's */
#ifdef __SANITIZE_ADDRESS__
    int all = 0;
#else
    int all = 1;
#endif
    check_long_loop();
    check_vector_loop();
    check_uint8_step(3);
    check_uint8_step(1);
    static const struct {
        const char *name;
        NetBody body;
        int gathers;
        int conv; /* a conv net's f32 step in channels_last too (attention takes NCHW) */
        int remat;    /* trained with remat, */
        int spans[3]; /* its plan's library steps spanning 1, 2 and 3 more */
    } nets[] = {{"group norm net", group_norm_body, 0, 1, 0, {0}},
                {"pad net", pad_body, 0, 1, 0, {0}},
                {"gather and attention bias [1,H,N,M] net", gather_body, 1, 0, 0, {0}},
                {"attention bias [B,1,N,M] net", mask_body, 0, 0, 0, {0}},
                {"packed attention bias [B,1,N,N] net", packed_body, 0, 0, 0, {0}},
                {"batch norm net", batch_norm_body, 0, 1, 0, {0}},
                {"batch norm and activation net, remat", bn_act_body, 0, 1, 1, {0, 2, 1}},
                /* bn1 and the squeeze's pool in one pass, bn1's gradient with the excitation's */
                {"squeeze-excitation net, remat", excite_body, 0, 1, 1, {1, 0, 1}}};
    for (int i = 0; i < 8; i++) {
        const int *remat = nets[i].remat ? nets[i].spans : NULL;
        check_net(nets[i].name, nets[i].body, nets[i].gathers, remat, CT_F32, 0, "sgd");
        if (all) {
            if (nets[i].conv)
                check_net(nets[i].name, nets[i].body, nets[i].gathers, remat, CT_F32, 1, "sgd");
            check_net(nets[i].name, nets[i].body, nets[i].gathers, remat, CT_F16, 1, "sgd");
            check_net(nets[i].name, nets[i].body, nets[i].gathers, remat, CT_BF16, 0, "sgd");
        }
    }
    /* the library updates (whole-tensor norms, scalar state) in a whole
     * step; LAMB's also in f16 with GradScaler's apply input (each kernel's
     * skipped step: test_optim_norm, test_lib_kernels); corrected weight
     * decay in LAMB's kernels and in a fused update; the cautious updates
     * (the mask, its mean, the update) of each fused update op, whose other
     * names differ from these in attributes only (test_optim checks every
     * name on ref and cpu); cadamw and cadan (Adan's previous gradient kept
     * on a skipped step) also in f16 with the apply input */
    static const char *const opts[] = {"lamb", "lambc", "lambcd", "lars", "larc", "nlarc", "nadam", "sgdp", "adamp",
                                       "adafactor", "adafactorbv", "muon", "adamc", "cadamw", "cadoptw", "clion",
                                       "csgdw", "crmsproptf", "cadan"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        if (all || i == 0)
            check_net(nets[1].name, nets[1].body, 0, NULL, CT_F32, 0, opts[i]);
    if (all) {
        check_net(nets[1].name, nets[1].body, 0, NULL, CT_F16, 1, opts[0]);
        check_net(nets[1].name, nets[1].body, 0, NULL, CT_F16, 1, "cadamw");
        check_net(nets[1].name, nets[1].body, 0, NULL, CT_F16, 1, "cadan");
    }
    check_seeded("test_maxvit", CT_F32, 1, 1);
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    for (int m = 0; m < 4; m++) {
        int conv = strcmp(models[m], "test_vit") != 0;
        check_model(models[m], CT_F32, 0, 1, 0, 0, 0);
        if (!all) {
            if (m == 0)
                check_model(models[m], CT_F16, 1, 0, 0, 0, 0);
        } else if (conv) {
            check_model(models[m], CT_F32, 1, 1, 0, 0, m >= 2);
            check_model(models[m], CT_F16, 1, 0, 0, 0, 0);
            /* layer scale's gradient: the f32 gradient's product with the
             * bf16 activation, read as stored */
            if (!strcmp(models[m], "test_convnext"))
                check_model(models[m], CT_BF16, 1, 1, 0, 0, 0);
            /* with remat, squeeze-excitation's gradient in the batch norm
             * gradient after it (lib_bn_excite_grad), channels-last */
            /* inference as ctimm-compile makes it: each depthwise convolution
             * with its folded batch norm's bias and its SiLU in one pass */
            if (!strcmp(models[m], "test_efficientnet")) {
                check_model(models[m], CT_F32, 1, 1, 1, 0, 0);
                check_model(models[m], CT_F16, 1, 0, 0, 1, 0);
            }
        } else {
            check_model(models[m], CT_BF16, 0, 1, 0, 0, 0);
            check_model(models[m], CT_F16, 0, 1, 0, 0, 0);
        }
    }
    return check_done("test_cuda_sim");
}
