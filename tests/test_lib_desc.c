/* The library calls of the cuda backend as pure descriptors
 * (codegen/cuda/gemm_desc.h, conv_desc.h): hand-built steps give the
 * expected cuBLASLt (m, n, k), transposes, leading dimensions, batch strides
 * and epilogue (a bias gradient's too), and cuDNN sizes and formats; every GEMM and convolution
 * step of test_resnet and test_vit training graphs (f32 NCHW, and AMP f16
 * channels_last: all NHWC in the conv net) translates, consistently with
 * its nodes' shapes. */
#include <string.h>

#include "check.h"
#include "model_graphs.h"
#include "codegen/cuda/conv_desc.h"

static ValueId input(Graph *g, const char *name, int ndim, const int64_t *d)
{
    return graph_add_value(g, (CtType){shape_make(ndim, d), CT_F32}, CT_ROLE_INPUT, name);
}

static ValueId node(Graph *g, CtOp op, int nin, const ValueId *in, const int64_t *a, int na)
{
    Node n = {.op = op, .nin = nin};
    memcpy(n.in, in, sizeof *in * (size_t)nin);
    if (na)
        memcpy(n.iattr, a, sizeof *a * (size_t)na);
    CtErr err;
    int i = graph_add_node(g, &n, "t", &err);
    CHECKF(i >= 0, "%s", err.msg);
    return i >= 0 ? g->nodes[i].out[0] : 0;
}

/* The plan's step that holds value v's producer. */
static const FuseStep *step_of(const Graph *g, const FusePlan *p, ValueId v)
{
    return &p->steps[p->step_of[g->values[v].producer]];
}

/* linear + gelu: tanh GELU in the epilogue (its input in aux when it is
 * read elsewhere), exact GELU left to a kernel. */
static void test_linear(void)
{
    for (int variant = 0; variant < 3; variant++) {
        Graph g;
        FusePlan p;
        CtErr err;
        graph_init(&g);
        ValueId x = input(&g, "x", 3, (int64_t[]){4, 8, 16}), w = input(&g, "w", 2, (int64_t[]){32, 16});
        ValueId b = input(&g, "b", 1, (int64_t[]){32});
        ValueId y = node(&g, CT_OP_linear, 3, (ValueId[]){x, w, b}, NULL, 0);
        ValueId z = node(&g, CT_OP_gelu, 1, &y, (int64_t[]){variant != 2}, 1);
        graph_mark_output(&g, z);
        if (variant == 1)
            graph_mark_output(&g, y);
        CHECK(fuse_plan(&g, &p, &err) == 0);
        GemmDesc d;
        CHECK(gemm_desc(&g, &p, step_of(&g, &p, y), &d, &err) == 0);
        CHECK(d.m == 32 && d.n == 32 && d.k == 16 && d.trans_a && !d.trans_b && d.lda == 16 && d.ldb == 16);
        CHECK(d.ldc == 32 && d.batch == 1 && d.a == w && d.b == x && d.epi.bias == b && d.epi.residual == -1);
        if (variant == 2)
            CHECK(d.epi.act == GEMM_ACT_NONE && d.epi.d == y && d.epi.tail == 1 && d.epi.aux == -1);
        else
            CHECK(d.epi.act == GEMM_ACT_GELU_TANH && d.epi.d == z && d.epi.tail == 2 &&
                  d.epi.aux == (variant ? y : -1));
        /* the timed choice's key: the epilogue's parts differ, the values it reads do not count */
        static char keys[3][256];
        gemm_desc_key(&d, keys[variant], sizeof keys[variant]);
        if (variant == 1) {
            CHECKF(!strcmp(keys[1], "gemm 32x32x16 trans 10 ld 16,16,32 batch 1 strides 0,0,0 ab f32 d f32 bias f32 "
                                    "epi bias 1 residual 0 aux 1 bgrad 0 act gelu_tanh"),
                   "%s", keys[1]);
            CHECK(strcmp(keys[0], keys[1]) != 0);
        }
        if (variant == 2)
            CHECK(strcmp(keys[2], keys[0]) != 0 && strcmp(keys[2], keys[1]) != 0);
        GemmDesc same = d;
        same.a = same.b = same.epi.d = 0;
        char again[256];
        gemm_desc_key(&same, again, sizeof again);
        CHECK(!strcmp(again, keys[variant]));
        same.batch = 2;
        gemm_desc_key(&same, again, sizeof again);
        CHECK(strcmp(again, keys[variant]) != 0);
        fuse_free(&p);
        graph_free(&g);
    }
}

/* matmul: batched with strides, a shared right matrix folded into n; a
 * residual then ReLU taken, a bias add after ReLU not. */
static void test_matmul(void)
{
    for (int shared = 0; shared < 2; shared++) {
        Graph g;
        FusePlan p;
        CtErr err;
        graph_init(&g);
        ValueId a = input(&g, "a", 4, (int64_t[]){2, 3, 5, 7});
        ValueId b = shared ? input(&g, "b", 2, (int64_t[]){7, 4}) : input(&g, "b", 4, (int64_t[]){2, 3, 7, 4});
        ValueId r = input(&g, "r", 4, (int64_t[]){2, 3, 5, 4}), c = input(&g, "c", 1, (int64_t[]){4});
        ValueId y = node(&g, CT_OP_matmul, 2, (ValueId[]){a, b}, NULL, 0);
        ValueId s = node(&g, CT_OP_add, 2, (ValueId[]){r, y}, NULL, 0);
        ValueId t = node(&g, CT_OP_relu, 1, &s, NULL, 0);
        ValueId u = node(&g, CT_OP_add, 2, (ValueId[]){t, c}, NULL, 0);
        graph_mark_output(&g, u);
        CHECK(fuse_plan(&g, &p, &err) == 0);
        GemmDesc d;
        CHECK(gemm_desc(&g, &p, step_of(&g, &p, y), &d, &err) == 0);
        CHECK(d.m == 4 && d.k == 7 && !d.trans_a && !d.trans_b && d.lda == 4 && d.ldb == 7 && d.ldc == 4);
        if (shared)
            CHECK(d.n == 30 && d.batch == 1 && d.stride_a == 0 && d.stride_b == 0 && d.stride_c == 0);
        else
            CHECK(d.n == 5 && d.batch == 6 && d.stride_a == 28 && d.stride_b == 35 && d.stride_c == 20);
        CHECK(d.a == b && d.b == a && d.epi.residual == r && d.epi.act == GEMM_ACT_RELU && d.epi.bias == -1);
        CHECK(d.epi.d == t && (d.epi.tail == 3 || step_of(&g, &p, u) != step_of(&g, &p, y)));
        fuse_free(&p);
        graph_free(&g);
    }
}

/* A weight gradient's GEMM and the sum of its B operand over k (BGRADB):
 * dW = dy^T x with db = dy summed over rows; a [..., k] B not transposed,
 * summed over its last dim; not a sum over another dim, nor of A, nor
 * beside a batched GEMM. */
static void test_bias_grad(void)
{
    for (int variant = 0; variant < 5; variant++) {
        Graph g;
        FusePlan p;
        CtErr err;
        graph_init(&g);
        int ta = variant != 1;
        ValueId a = variant == 1 ? input(&g, "a", 3, (int64_t[]){2, 5, 6})
                    : variant == 4 ? input(&g, "a", 3, (int64_t[]){2, 6, 4})
                                   : input(&g, "a", 2, (int64_t[]){6, 4});
        ValueId b = variant == 4 ? input(&g, "b", 3, (int64_t[]){2, 6, 3}) : input(&g, "b", 2, (int64_t[]){6, 3});
        ValueId y = node(&g, CT_OP_matmul, 2, (ValueId[]){a, b}, (int64_t[]){ta, 0}, 2);
        int64_t mask = variant == 1 ? 4 : variant == 2 ? 2 : variant == 4 ? 2 : 1;
        ValueId r = node(&g, CT_OP_reduce_sum, 1, (ValueId[]){variant == 3 ? b : a}, (int64_t[]){mask, 0}, 2);
        graph_mark_output(&g, y);
        graph_mark_output(&g, r);
        CHECK(fuse_plan(&g, &p, &err) == 0);
        GemmDesc d;
        CHECK(gemm_desc(&g, &p, step_of(&g, &p, y), &d, &err) == 0);
        ValueId got = gemm_bias_grad(&g, &p, step_of(&g, &p, y), step_of(&g, &p, r), &d);
        CHECKF(got == (variant < 2 ? r : -1), "variant %d: %d", variant, got);
        if (variant == 0)
            CHECK(d.m == 3 && d.n == 4 && d.k == 6 && d.trans_b && d.ldb == 4 && d.b == a);
        if (variant == 1)
            CHECK(d.m == 3 && d.n == 10 && d.k == 6 && !d.trans_b && d.ldb == 6 && d.b == a);
        fuse_free(&p);
        graph_free(&g);
    }
}

/* conv2d 3x3 stride 2 + bias + ReLU, and its two gradients' directions. */
static void test_conv(void)
{
    Graph g;
    FusePlan p;
    CtErr err;
    graph_init(&g);
    ValueId x = input(&g, "x", 4, (int64_t[]){2, 8, 10, 10}), w = input(&g, "w", 4, (int64_t[]){16, 8, 3, 3});
    ValueId b = input(&g, "b", 4, (int64_t[]){1, 16, 1, 1});
    int64_t a[9] = {2, 2, 1, 1, 1, 1, 1};
    ValueId y = node(&g, CT_OP_conv2d, 2, (ValueId[]){x, w}, a, 7);
    ValueId z = node(&g, CT_OP_relu, 1, (ValueId[]){node(&g, CT_OP_add, 2, (ValueId[]){y, b}, NULL, 0)}, NULL, 0);
    a[7] = 10, a[8] = 10;
    ValueId dx = node(&g, CT_OP_conv2d_grad_input, 2, (ValueId[]){z, w}, a, 9);
    a[7] = 3, a[8] = 3;
    ValueId dw = node(&g, CT_OP_conv2d_grad_weight, 2, (ValueId[]){x, z}, a, 9);
    graph_mark_output(&g, dx);
    graph_mark_output(&g, dw);
    CHECK(fuse_plan(&g, &p, &err) == 0);
    ConvDesc d;
    CHECK(conv_desc(&g, &p, step_of(&g, &p, y), &d, &err) == 0);
    CHECK(d.dir == CONV_FWD && d.n == 2 && d.c == 8 && d.h == 10 && d.k == 16 && d.r == 3 && d.p == 5 && d.q == 5);
    CHECK(d.stride_h == 2 && d.pad_w == 1 && d.groups == 1 && !d.x_nhwc && !d.y_nhwc && d.x_type == CT_F32);
    CHECK(d.epi.bias == b && d.epi.act == GEMM_ACT_RELU && d.epi.d == z && d.epi.tail == 3);
    char key[512];
    conv_desc_key(&d, key, sizeof key);
    CHECKF(!strcmp(key, "conv fwd x 2x8x10x10 nchw f32 w 16x8x3x3 nchw f32 y 5x5 nchw f32 pad 1,1 stride 2,2 "
                        "dil 1,1 groups 1 epi 101"), "%s", key);
    CHECK(conv_desc(&g, &p, step_of(&g, &p, dx), &d, &err) == 0);
    CHECK(d.dir == CONV_BWD_DATA && d.x == dx && d.y == z && d.wt == w && d.h == 10 && d.p == 5 && d.epi.d == dx);
    CHECK(conv_desc(&g, &p, step_of(&g, &p, dw), &d, &err) == 0);
    CHECK(d.dir == CONV_BWD_FILTER && d.x == x && d.y == z && d.wt == dw && d.r == 3 && d.epi.tail == 1);
    GemmDesc gd;
    CHECK(gemm_desc(&g, &p, step_of(&g, &p, y), &gd, &err) != 0 && strstr(err.msg, "not a GEMM"));
    fuse_free(&p);
    graph_free(&g);
}

/* Every GEMM and convolution step translates; the sizes agree with the
 * shapes (m*n*batch elements in D, p and q by the convolution's rule). */
static void test_models(void)
{
    static const char *const models[] = {"test_resnet", "test_vit"};
    for (int m = 0; m < 2; m++)
        for (int amp_cl = 0; amp_cl < 2; amp_cl++) {
            Graph g;
            FusePlan p;
            CtErr err;
            if (model_graph(models[m], &(GraphSpec){.training = 1, .amp = amp_cl ? CT_F16 : CT_F32, .channels_last = amp_cl},
                            &g))
                continue;
            CHECK(fuse_plan(&g, &p, &err) == 0);
            int gemms = 0, convs = 0, nhwc = 0;
            for (int s = 0; s < p.nsteps; s++) {
                const FuseStep *st = &p.steps[s];
                CtOp op = g.nodes[p.nodes[st->first]].op;
                if (st->kind != FUSE_LIBRARY)
                    continue;
                if (op == CT_OP_linear || op == CT_OP_matmul) {
                    GemmDesc d;
                    CHECKF(gemm_desc(&g, &p, st, &d, &err) == 0, "%s", err.msg);
                    CHECK(d.m * d.n * d.batch == shape_numel(&g.values[d.epi.d].type.shape));
                    CHECK(d.epi.tail >= 1 && d.epi.tail <= st->n && d.ab_type == (amp_cl ? CT_F16 : CT_F32));
                    gemms++;
                } else if (op == CT_OP_conv2d || op == CT_OP_conv2d_grad_input || op == CT_OP_conv2d_grad_weight) {
                    ConvDesc d;
                    CHECKF(conv_desc(&g, &p, st, &d, &err) == 0, "%s", err.msg);
                    CHECK(d.p == (d.h + 2 * d.pad_h - d.dil_h * (d.r - 1) - 1) / d.stride_h + 1);
                    CHECK(d.q == (d.w + 2 * d.pad_w - d.dil_w * (d.s - 1) - 1) / d.stride_w + 1);
                    CHECK(d.c % d.groups == 0 && d.k % d.groups == 0 && d.w_nhwc == (d.r * d.s == 1 && amp_cl));
                    CHECK(m == 1 || (d.x_nhwc == amp_cl && d.y_nhwc == amp_cl)); /* a conv net: all NHWC */
                    nhwc += d.x_nhwc;
                    convs++;
                }
            }
            CHECKF(gemms > 0 && convs > 0, "%s: %d GEMM steps, %d conv steps", models[m], gemms, convs);
            printf("test_lib_desc: %s%s: %d GEMM and %d convolution steps (%d NHWC)\n", models[m],
                   amp_cl ? " amp f16 channels_last" : "", gemms, convs, nhwc);
            fuse_free(&p);
            graph_free(&g);
        }
}

int main(void)
{
    test_linear();
    test_matmul();
    test_bias_grad();
    test_conv();
    test_models();
    return check_done("test_lib_desc");
}
