/* The input ops (ir/ops/image.c) and the pipeline's input stage: the uint8
 * batch (RGB, or gray's one channel) normalised as timm's ToTensor +
 * Normalize give it, bit for bit on ref and cpu; random erasing's boxes clipped, later over earlier, 'rand'
 * one value per channel; bad inputs refused by the shape rules; a model's
 * logits from the uint8 input the same as from the batch normalised by
 * hand; the training graph's inputs in the order the trainer feeds them;
 * under channels-last the uint8 input keeps its bytes and the normalised
 * batch is NHWC from the start. (Mixup's and erasing's draws through these
 * ops: tests/test_mixup.c, tests/test_transforms.c.) */
#include <string.h>

#include "check.h"
#include "ir/counter_rng.h"
#include "models/registry.h"
#include "one_node.h"
#include "passes/pipeline.h"
#include "runtime/data/rng.h"

static const double mean[4] = {0.485, 0.456, 0.406, 0.449}, stdv[4] = {0.229, 0.224, 0.225, 0.226};

enum { B = 2, S = 6, C = 3, CMAX = 4 };

/* A batch of `chans` channels (3: RGB; 1: gray; 4: RGBA; a zero std past
 * them that no kernel may read), bit for bit on ref and cpu. */
static void check_normalize(int chans)
{
    uint8_t x[B * S * S * CMAX];
    for (int i = 0; i < B * S * S * chans; i++)
        x[i] = (uint8_t)(i * 37 + (i >> 3));
    x[0] = 0;
    x[1] = 255;
    double f[8];
    for (int k = 0; k < 8; k++)
        f[k] = k % 4 < chans ? (k < 4 ? mean[k] : stdv[k - 4]) : 0;
    float y[B * CMAX * S * S];
    CtTensor in = {{{4, {B, S, S, chans}}, CT_U8}, x};
    one_node_f32(CT_OP_image_normalize, 1, &in, NULL, 0, f, 8, y, B * chans * S * S, 0);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < chans; c++)
            for (int p = 0; p < S * S; p++) {
                float want = (float)((x[(b * S * S + p) * chans + c] / 255.0 - mean[c]) / stdv[c]);
                bad += y[(b * chans + c) * S * S + p] != want;
            }
    CHECKF(bad == 0, "%d channel(s): %d values differ from (x / 255 - mean) / std", chans, bad);
}

static void test_normalize(void)
{
    check_normalize(3);
    check_normalize(1);
    check_normalize(4);
    double f[8] = {mean[0], mean[1], mean[2], mean[3], stdv[0], stdv[1], stdv[2], stdv[3]};

    /* the shape rule refuses what the kernels cannot take */
    Graph g;
    CtErr err;
    const struct {
        CtType t;
        double std0;
        const char *why;
    } cases[] = {
        {{{4, {B, S, S, C}}, CT_F32}, 0.2, "uint8 batch"},
        {{{4, {B, S, S, 5}}, CT_U8}, 0.2, "5 channels"},
        {{{4, {B, S, S, C}}, CT_U8}, 0, "std not 0"},
    };
    for (int k = 0; k < 3; k++) {
        graph_init(&g);
        f[4] = cases[k].std0;
        Node n = {.op = CT_OP_image_normalize, .nin = 1, .in = {graph_add_value(&g, cases[k].t, CT_ROLE_INPUT, "x")}};
        memcpy(n.fattr, f, sizeof f);
        CHECKF(graph_add_node(&g, &n, "in", &err) < 0 && strstr(err.msg, cases[k].why), "case %d: %s", k, err.msg);
        graph_free(&g);
    }
}

static void test_erase(void)
{
    enum { H = 10, W = 8, K = 3 };
    float x[B * C * H * W], y[B * C * H * W];
    for (int i = 0; i < B * C * H * W; i++)
        x[i] = 100 + (float)i;
    /* image 0: a box, a second over part of it; image 1: a box reaching past
     * the right and bottom edges, and none */
    int64_t boxes[B * K * 5] = {1, 1, 4, 4, 11, 3, 3, 4, 4, 12, 0, 0, 0, 0, 0,
                                7, 5, 9, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t mode = 0; mode < 3; mode++) {
        CtTensor in[2] = {{{{4, {B, C, H, W}}, CT_F32}, x}, {{{3, {B, K, 5}}, CT_I64}, boxes}};
        one_node_f32(CT_OP_random_erase, 2, in, &mode, 1, NULL, 0, y, B * C * H * W, 0);
        int kept = 0, wrong = 0;
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                for (int r = 0; r < H; r++)
                    for (int q = 0; q < W; q++) {
                        int i = ((b * C + c) * H + r) * W + q;
                        int in0 = b == 0 && r >= 1 && r < 5 && q >= 1 && q < 5;
                        int in1 = b == 0 && r >= 3 && r < 7 && q >= 3 && q < 7;
                        int in2 = b == 1 && r >= 7 && q >= 5;
                        if (!in0 && !in1 && !in2) {
                            kept += y[i] == x[i];
                            continue;
                        }
                        const int64_t *box = in1 ? boxes + 5 : in0 ? boxes : boxes + 15;
                        int64_t j = (c * box[2] + r - box[0]) * box[3] + q - box[1];
                        double want = mode == 0 ? 0 : crng_normal((unsigned long long)box[4], mode == 1 ? c : j);
                        wrong += y[i] != (float)want;
                    }
        CHECKF(kept == B * C * H * W - C * (16 + 16 - 4 + 3 * 3), "mode %lld: %d kept", (long long)mode, kept);
        CHECKF(wrong == 0, "mode %lld: %d erased values wrong", (long long)mode, wrong);
    }
}

/* Normal values from the counter stream: mean 0, variance 1. */
static void test_counter_normal(void)
{
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double v = crng_normal(77, (unsigned long long)i);
        s += v;
        s2 += v * v;
    }
    CHECK_NEAR(s / n, 0, 0.01);
    CHECK_NEAR(s2 / n, 1, 0.02);
    CHECK(crng_normal(77, 5) != crng_normal(78, 5) && crng_normal(77, 5) != crng_normal(77, 6));
}

static int build(const char *model, int training, int batch, int chans, Graph *g)
{
    ModelSpec spec = {.batch_size = batch, .training = training, .args = model_args_default()};
    spec.args.in_chans = chans;
    CtErr err;
    int rc = model_build(model_find(model), &spec, g, &err);
    CHECKF(rc == 0, "%s: %s", model, err.msg);
    return rc;
}

static InputSpec spec_u8(void)
{
    return (InputSpec){.u8 = 1, .mean = {mean[0], mean[1], mean[2], mean[3]},
                       .std = {stdv[0], stdv[1], stdv[2], stdv[3]}};
}

/* The logits of test_resnet's eval graph from a uint8 batch of `chans`
 * channels against those of the f32 graph from the batch normalised on the
 * host, on cpu; the normalisation's attributes past the channels are 0 and
 * 1, whatever InputSpec holds there. */
static void test_model_input(int chans)
{
    Graph f, u;
    CtErr err;
    if (build("test_resnet", 0, B, chans, &f) || build("test_resnet", 0, B, chans, &u))
        return;
    CHECKF(pipeline_run(&(Pipeline){.bn_fold = 1, .verify = 1}, &f, NULL, &err) == 0, "%s", err.msg);
    CHECKF(pipeline_run(&(Pipeline){.input = spec_u8(), .bn_fold = 1, .verify = 1}, &u, NULL, &err) == 0, "%s",
           err.msg);
    const CtShape *xs = &f.values[0].type.shape;
    int64_t h = xs->d[2], w = xs->d[3], n = B * chans * h * w;
    const Value *in = &u.values[0];
    CHECK(in->role == CT_ROLE_INPUT && in->type.dtype == CT_U8 && in->type.shape.d[1] == h &&
          in->type.shape.d[3] == chans);
    CHECK(u.nodes[0].op == CT_OP_image_normalize);
    for (int k = 0; k < 8; k++)
        CHECKF(u.nodes[0].fattr[k] == (k % 4 < chans ? (k < 4 ? mean[k] : stdv[k - 4]) : k / 4), "fattr[%d] %g", k,
               u.nodes[0].fattr[k]);
    uint8_t *img = malloc((size_t)n);
    float *x = malloc(sizeof *x * (size_t)n);
    CtRng r = rng_for(5, 0, 0);
    for (int64_t i = 0; i < n; i++)
        img[i] = (uint8_t)rng_below(&r, 256);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < chans; c++)
            for (int64_t p = 0; p < h * w; p++)
                x[(b * chans + c) * h * w + p] =
                    (float)((img[(b * h * w + p) * chans + c] / 255.0 - mean[c]) / stdv[c]);
    CtState st;
    state_create(&st, &f);
    state_init(&st, 3);
    CtTensor tf = {{{4, {B, chans, h, w}}, CT_F32}, x}, tu = {{{4, {B, h, w, chans}}, CT_U8}, img}, lf, lu;
    CHECKF(backend_run_once(&ct_backend_cpu, &f, &st, &tf, 1, &lf, NULL, &err) == 0, "%s", err.msg);
    CHECKF(backend_run_once(&ct_backend_cpu, &u, &st, &tu, 1, &lu, NULL, &err) == 0, "%s", err.msg);
    int64_t k = shape_numel(&lf.type.shape);
    CHECK(k == shape_numel(&lu.type.shape));
    CHECK(!memcmp(lf.data, lu.data, sizeof(float) * (size_t)k));
    tensor_free(&lf);
    tensor_free(&lu);
    state_free(&st);
    free(img);
    free(x);
    graph_free(&f);
    graph_free(&u);
}

/* The training graph's inputs: the batch, the erasing boxes, the mixing
 * numbers, then the training step's; under channels-last the normalised
 * batch is NHWC and nothing converts the uint8 one. */
static void test_training_inputs(void)
{
    Graph g;
    CtErr err;
    if (build("test_resnet", 1, 4, 0, &g))
        return;
    InputSpec in = spec_u8();
    in.erase_boxes = 2;
    in.erase_mode = 2;
    in.mix = 1;
    Pipeline p = {.input = in, .training = 1, .loss = {CT_LOSS_SOFT_TARGET, 0, -1, 1},
                  .opt = {.kind = CT_OPT_SGD, .momentum = 0.9}, .channels_last = 1, .verify = 1};
    CHECKF(pipeline_run(&p, &g, NULL, &err) == 0, "%s", err.msg);
    const char *want[] = {NULL, "erase_boxes", "mix_params"};
    CtDType dt[] = {CT_U8, CT_I64, CT_F32};
    int k = 0, to_layout_of_u8 = 0;
    for (ValueId v = 0; v < g.nvalues; v++) {
        const Value *val = &g.values[v];
        if (val->role != CT_ROLE_INPUT)
            continue;
        if (k < 3)
            CHECKF(val->type.dtype == dt[k] && (!want[k] || (val->name && !strcmp(val->name, want[k]))),
                   "input %d is %s %s", k, ct_dtype_name(val->type.dtype), val->name ? val->name : "-");
        k++;
    }
    CHECKF(k == 6, "%d inputs: the batch, boxes, params, targets, lr, loss scale", k);
    for (int i = 0; i < g.nnodes; i++) {
        const Node *n = &g.nodes[i];
        to_layout_of_u8 += n->op == CT_OP_to_layout && g.values[n->in[0]].type.dtype == CT_U8;
        if (n->op == CT_OP_image_normalize)
            CHECK(g.values[n->out[0]].layout == CT_LAYOUT_CHANNELS_LAST);
    }
    CHECK(to_layout_of_u8 == 0);
    CHECK(g.nodes[0].op == CT_OP_image_normalize && g.nodes[1].op == CT_OP_random_erase &&
          g.nodes[2].op == CT_OP_mix_images);
    graph_free(&g);
}

int main(void)
{
    test_normalize();
    test_erase();
    test_counter_normal();
    test_model_input(3);
    test_model_input(1);
    test_model_input(4);
    test_training_inputs();
    return check_done("test_image_ops");
}
