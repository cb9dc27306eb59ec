/* The cuda backend's library kernels (codegen/cuda/lib_kernels.h), built
 * here as host C from the same text NVRTC compiles, run with the launches
 * codegen/cuda/lib_launch*.c derive from each node: every supported op on
 * small shapes, its tensors in NCHW and NHWC (channels_last) memory, equals
 * the ref backend within 1e-5 relative (f32 storage, sums in double); and
 * again with a NaN or infinities in the first or the last float input,
 * NaN and infinities exactly where the ref backend has them (which
 * tests/test_nan.c holds to PyTorch's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen/cuda/lib_launch.h"
#include "ir/ops.h"
#include "runtime/backend.h"

/* The host dialect of the kernel text, f32 storage, with the activations'
 * formulas over float. */
#define FX_T float
#define FX_EXP expf
#define FX_SQRT sqrtf
#define FX_ERF erff
#define FX_TANH tanhf
#define FX_POW powf
#include "ir/formulas.h"
#include "ir/counter_rng.h"
#define CT_INF ((double)INFINITY)
#define CT_GLOBAL static void
#define CT_BOUNDS(blocks)
#define CT_LOOP(i, n) for (long long i = 0; i < (n); i++)
#define CT_FIRST 0LL
#define CT_STRIDE 1LL
#define CT_UNROLL
#define CT_BLOCK_LOOP(i, n) for (long long i = 0; i < (n); i++)
#define CT_TID 0
#define CT_NTHREADS 1
#define CT_SYNC()
#define CT_SHARED
#define CT_FENCE()
#define CT_ATOMIC_INC(p) ((*(p))++)
#define CT_WARP_LOOP(i, n) for (long long i = 0; i < (n); i++)
#define CT_LANE 0
#define CT_LANES 1
#define CT_LANE_SUM(v) (v)
#define CT_SEG_SUM(v, lanes) (v)
#define CT_DYN_SHARED(T, name) T name[CT_ATT_SMEM_MOST]
#define CT_T float
#define CT_LD(v) (v)
#define CT_ST(f) (f)
#define CT_SFX(name) name##_f32
#define CT_ACC double
typedef struct {
    unsigned int x, y, z, w;
} ct_u4;
#define CT_V16_LD(u, p) memcpy(&(u), (p), 16)
#define CT_V16_ST(p, u) memcpy((p), &(u), 16)
#include "codegen/cuda/lib_kernels.h"

#define P(k) (mem[k])
#define F(k) ((float *)mem[k])
#define I(k) (l->arg[k].i)
#define X(k) (l->arg[k].ix)
#define R(k) (l->arg[k].f)
#define D(k) (l->arg[k].d)

/* Runs one launch: mem[k] is argument k's memory (value or scratch). */
static void run_launch(const LibLaunch *l, void **mem)
{
    const char *k = l->kernel;
    if (!strcmp(k, "ct_copy_f32"))
        ct_copy_f32(F(0), F(1), X(2));
    else if (!strcmp(k, "ct_act_f32"))
        ct_act_f32(F(0), F(1), I(2), (int)I(3), (int)I(4));
    else if (!strcmp(k, "ct_add_f32"))
        ct_add_f32(F(0), F(1), F(2), X(3));
    else if (!strcmp(k, "ct_copy_cast_f32"))
        ct_copy_cast_f32(F(0), F(1), (int)I(2), X(3));
    else if (!strcmp(k, "ct_cast_f32"))
        ct_cast_f32(F(0), F(1), (int)I(2), I(3));
    else if (!strcmp(k, "ct_pool_f32"))
        ct_pool_f32(F(0), F(1), X(2), I(3), I(4), l->arg[5].pool);
    else if (!strcmp(k, "ct_pool_argmax_f32"))
        ct_pool_argmax_f32(F(0), (unsigned char *)P(1), X(2), I(3), I(4), l->arg[5].pool);
    else if (!strcmp(k, "ct_pool_grad_f32"))
        ct_pool_grad_f32(F(0), (unsigned char *)P(1), F(2), F(3), X(4), I(5), I(6), I(7), I(8), l->arg[9].pool);
    else if (!strcmp(k, "ct_sdpa_f32"))
        ct_sdpa_f32(F(0), F(1), F(2), F(3), F(4), F(5), I(6), I(7), I(8), I(9), R(10), I(11), I(12), I(13), (int)I(14));
    else if (!strcmp(k, "ct_sdpa_grad_q_f32"))
        ct_sdpa_grad_q_f32(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), I(8), I(9), I(10), I(11), R(12), I(13),
                           I(14), I(15), (int)I(16));
    else if (!strcmp(k, "ct_sdpa_grad_kv_f32"))
        ct_sdpa_grad_kv_f32(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), I(8), I(9), I(10), I(11), R(12), I(13),
                            I(14), I(15), (int)I(16));
    else if (!strcmp(k, "ct_attn_f32"))
        ct_attn_f32(F(0), F(1), F(2), F(3), F(4), F(5), I(6), I(7), I(8), I(9), R(10), I(11), I(12), I(13), (int)I(14));
    else if (!strcmp(k, "ct_attn_delta_f32"))
        ct_attn_delta_f32(F(0), F(1), F(2), F(3), I(4), I(5), I(6), I(7), I(8), (int)I(9));
    else if (!strcmp(k, "ct_attn_grad_q_f32"))
        ct_attn_grad_q_f32(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), I(8), I(9), I(10), I(11), R(12), I(13),
                           I(14), I(15), (int)I(16));
    else if (!strcmp(k, "ct_attn_grad_kv_f32"))
        ct_attn_grad_kv_f32(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), I(8), I(9), I(10), I(11), R(12), I(13),
                            I(14), I(15), (int)I(16));
    else if (!strcmp(k, "ct_fill_f32"))
        ct_fill_f32(F(0), I(1), R(2));
    else if (!strcmp(k, "ct_reduce_sum_f32"))
        ct_reduce_sum_f32(F(0), F(1), F(2), (int)I(3), X(4), X(5), F(6), F(7));
    else if (!strcmp(k, "ct_reduce_sum_cols_f32"))
        ct_reduce_sum_cols_f32(F(0), F(1), (int)I(2), (double *)P(3), P(4), F(5), X(6), X(7), I(8), F(9), F(10), D(11),
                               (double *)P(12), I(13), (int)I(14), (int)I(15));
    else if (!strcmp(k, "ct_dw_conv_f32"))
        ct_dw_conv_f32(F(0), F(1), F(2), F(3), (int)I(4), (int)I(5), (int)I(6), (int)I(7), (int)I(8), (int)I(9),
                       (int)I(10), (int)I(11), (int)I(12), (int)I(13), (int)I(14), (int)I(15), (int)I(16), (int)I(17),
                       (int)I(18), (int)I(19));
    else if (!strcmp(k, "ct_dw_conv_act_f32"))
        ct_dw_conv_act_f32(F(0), F(1), F(2), F(3), (int)I(4), (int)I(5), (int)I(6), (int)I(7), (int)I(8), (int)I(9),
                           (int)I(10), (int)I(11), (int)I(12), (int)I(13), (int)I(14), (int)I(15), (int)I(16),
                           (int)I(17), (int)I(18), (int)I(19), (int)I(20), (int)I(21));
    else if (!strcmp(k, "ct_dw_conv_grad_w_f32"))
        ct_dw_conv_grad_w_f32(F(0), F(1), F(2), F(3), (int)I(4), (int)I(5), (int)I(6), (int)I(7), (int)I(8),
                              (int)I(9), (int)I(10), (int)I(11), (int)I(12), (int)I(13), (int)I(14), (int)I(15),
                              (int)I(16), (int)I(17), (int)I(18), (int)I(19));
    else if (!strcmp(k, "ct_dw_conv_grad_w_sum_f32"))
        ct_dw_conv_grad_w_sum_f32(F(0), F(1), F(2), F(3), (int)I(4), (int)I(5), (int)I(6), (int)I(7), I(8), I(9),
                                  I(10));
    else if (!strcmp(k, "ct_softmax_f32"))
        ct_softmax_f32(F(0), F(1), X(2), I(3), I(4), I(5));
    else if (!strcmp(k, "ct_softmax_grad_f32"))
        ct_softmax_grad_f32(F(0), F(1), F(2), X(3), I(4), I(5), I(6));
    else if (!strcmp(k, "ct_layer_norm_f32"))
        ct_layer_norm_f32(F(0), F(1), F(2), F(3), (int)I(4), F(5), F(6), F(7), X(8), I(9), I(10), I(11), R(12));
    else if (!strcmp(k, "ct_layer_norm_grad_x_f32"))
        ct_layer_norm_grad_x_f32(F(0), F(1), F(2), F(3), (int)I(4), F(5), F(6), F(7), X(8), I(9), I(10), I(11), R(12));
    else if (!strcmp(k, "ct_layer_norm_grad_x_rows_f32"))
        ct_layer_norm_grad_x_rows_f32(F(0), F(1), F(2), F(3), (int)I(4), F(5), F(6), F(7), X(8), I(9), I(10), I(11),
                                      R(12));
    else if (!strcmp(k, "ct_layer_norm_grad_w_f32"))
        ct_layer_norm_grad_w_f32(F(0), F(1), (int)I(2), F(3), (double *)P(4), P(5), F(6), F(7), X(8), I(9), I(10),
                                 I(11));
    else if (!strcmp(k, "ct_group_norm_f32"))
        ct_group_norm_f32(F(0), F(1), F(2), F(3), X(4), X(5), I(6), R(7));
    else if (!strcmp(k, "ct_group_norm_grad_x_f32"))
        ct_group_norm_grad_x_f32(F(0), F(1), F(2), F(3), P(4), X(5), X(6), I(7), R(8));
    else if (!strcmp(k, "ct_group_norm_grad_w_f32"))
        ct_group_norm_grad_w_f32(F(0), F(1), P(2), F(3), F(4), X(5), I(6), I(7), I(8));
    else if (!strcmp(k, "ct_bn_stats_f32"))
        ct_bn_stats_f32(F(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8), (int)I(9), P(10), X(11), I(12), I(13),
                        I(14), R(15), R(16), F(17));
    else if (!strcmp(k, "ct_bn_coef_sums_f32"))
        ct_bn_coef_sums_f32(F(0), P(1), P(2), P(3), P(4), P(5), P(6), (int)I(7), P(8), I(9), I(10), R(11), R(12));
    else if (!strcmp(k, "ct_bn_grad_stats_f32"))
        ct_bn_grad_stats_f32(F(0), F(1), P(2), (int)I(3), (int)I(4), F(5), F(6), F(7), I(8), P(9), P(10), P(11),
                             P(12), P(13), P(14), P(15), (int)I(16), P(17), X(18), I(19), I(20), I(21), (int)I(22),
                             R(23));
    else if (!strcmp(k, "ct_bn_coef_f32"))
        ct_bn_coef_f32(F(0), F(1), F(2), F(3), P(4), I(5), R(6));
    else if (!strcmp(k, "ct_bn_apply_f32"))
        ct_bn_apply_f32(F(0), P(1), F(2), P(3), F(4), X(5), I(6), I(7), I(8), (int)I(9), (int)I(10));
    else if (!strcmp(k, "ct_bn_grad_apply_f32"))
        ct_bn_grad_apply_f32(F(0), F(1), P(2), (int)I(3), (int)I(4), F(5), F(6), I(7), P(8), F(9), F(10), X(11),
                             I(12), I(13), I(14), (int)I(15));
    else if (!strcmp(k, "ct_cross_entropy_rows_f32"))
        ct_cross_entropy_rows_f32(F(0), P(1), F(2), I(3), I(4), R(5));
    else if (!strcmp(k, "ct_mean_loss_f32"))
        ct_mean_loss_f32(F(0), F(1), I(2));
    else if (!strcmp(k, "ct_cross_entropy_grad_f32"))
        ct_cross_entropy_grad_f32(F(0), P(1), F(2), F(3), I(4), I(5), R(6));
    else if (!strcmp(k, "ct_bce_rows_f32"))
        ct_bce_rows_f32(F(0), P(1), F(2), F(3), I(4), I(5), R(6), R(7), R(8), I(9));
    else if (!strcmp(k, "ct_bce_grad_f32"))
        ct_bce_grad_f32(F(0), P(1), F(2), F(3), F(4), I(5), I(6), R(7), R(8), R(9), I(10));
    else if (!strcmp(k, "ct_sq_partials_f32"))
        ct_sq_partials_f32(F(0), F(1), R(2), D(3), F(4), F(5), (double *)P(6), (double *)P(7), I(8), I(9), I(10));
    else if (!strcmp(k, "ct_lamb_moments_f32"))
        ct_lamb_moments_f32(F(0), F(1), F(2), F(3), F(4), P(5), F(6), F(7), F(8), F(9), F(10), I(11), R(12), R(13),
                            R(14), R(15), I(16));
    else if (!strcmp(k, "ct_lamb_ratio_f32"))
        ct_lamb_ratio_f32((double *)P(0), I(1), (double *)P(2), R(3), I(4), I(5));
    else if (!strcmp(k, "ct_lamb_apply_f32"))
        ct_lamb_apply_f32(F(0), F(1), (double *)P(2), F(3), F(4), F(5), I(6), R(7), I(8), D(9));
    else if (!strcmp(k, "ct_lars_ratio_f32"))
        ct_lars_ratio_f32((double *)P(0), I(1), F(2), (double *)P(3), R(4), R(5), R(6), I(7), I(8));
    else if (!strcmp(k, "ct_lars_apply_f32"))
        ct_lars_apply_f32(F(0), F(1), F(2), F(3), F(4), (double *)P(5), F(6), F(7), I(8), R(9), R(10), I(11));
    else if (!strcmp(k, "ct_nadam_update_f32"))
        ct_nadam_update_f32(F(0), F(1), F(2), F(3), F(4), F(5), P(6), F(7), F(8), F(9), F(10), I(11), R(12), R(13),
                            R(14), R(15), I(16));
    else if (!strcmp(k, "ct_nadam_product_f32"))
        ct_nadam_product_f32(F(0), P(1), F(2), F(3), R(4), I(5));
    else if (!strcmp(k, "ct_sgdp_moments_f32"))
        ct_sgdp_moments_f32(F(0), F(1), F(2), F(3), F(4), I(5), R(6), I(7));
    else if (!strcmp(k, "ct_adamp_moments_f32"))
        ct_adamp_moments_f32(F(0), F(1), F(2), P(3), F(4), F(5), F(6), F(7), I(8), R(9), R(10), R(11), I(12));
    else if (!strcmp(k, "ct_proj_rows_f32"))
        ct_proj_rows_f32(F(0), F(1), F(2), (double *)P(3), I(4), I(5));
    else if (!strcmp(k, "ct_proj_decide_f32"))
        ct_proj_decide_f32((double *)P(0), I(1), I(2), I(3), (double *)P(4), R(5), R(6));
    else if (!strcmp(k, "ct_sgdp_apply_f32"))
        ct_sgdp_apply_f32(F(0), F(1), (double *)P(2), (double *)P(3), F(4), F(5), F(6), I(7), I(8), R(9), R(10),
                          R(11), R(12));
    else if (!strcmp(k, "ct_adamp_apply_f32"))
        ct_adamp_apply_f32(F(0), F(1), (double *)P(2), (double *)P(3), F(4), P(5), F(6), F(7), I(8), I(9), R(10),
                           R(11), R(12), R(13));
    else if (!strcmp(k, "ct_af_coef_f32"))
        ct_af_coef_f32(P(0), (double *)P(1), R(2), R(3), I(4), I(5));
    else if (!strcmp(k, "ct_af_full_f32"))
        ct_af_full_f32(F(0), F(1), (double *)P(2), F(3), F(4), (double *)P(5), I(6), R(7));
    else if (!strcmp(k, "ct_af_mean_f32"))
        ct_af_mean_f32(F(0), F(1), (double *)P(2), F(3), F(4), (double *)P(5), I(6), I(7), I(8), R(9));
    else if (!strcmp(k, "ct_af_rowcol_f32"))
        ct_af_rowcol_f32((double *)P(0), (double *)P(1), I(2), I(3), I(4));
    else if (!strcmp(k, "ct_af_factored_f32"))
        ct_af_factored_f32(F(0), (double *)P(1), (double *)P(2), (double *)P(3), F(4), (double *)P(5), I(6), I(7), I(8),
                           I(9), I(10), I(11));
    else if (!strcmp(k, "ct_af_clip_f32"))
        ct_af_clip_f32((double *)P(0), I(1), I(2), (double *)P(3), R(4));
    else if (!strcmp(k, "ct_af_apply_f32"))
        ct_af_apply_f32(F(0), (double *)P(1), (double *)P(2), F(3), F(4), F(5), F(6), F(7), I(8), D(9), R(10), I(11),
                        I(12), I(13), D(14));
    else if (!strcmp(k, "ct_muon_moments_f32"))
        ct_muon_moments_f32(F(0), F(1), F(2), F(3), (double *)P(4), I(5), I(6), D(7), I(8));
    else if (!strcmp(k, "ct_muon_norm_f32"))
        ct_muon_norm_f32((double *)P(0), I(1), (double *)P(2), D(3), D(4));
    else if (!strcmp(k, "ct_muon_scale_f32"))
        ct_muon_scale_f32((double *)P(0), (double *)P(1), I(2));
    else if (!strcmp(k, "ct_muon_gemm_f32"))
        ct_muon_gemm_f32((double *)P(0), (double *)P(1), (double *)P(2), (double *)P(3), I(4), I(5), I(6), I(7), D(8),
                         D(9));
    else if (!strcmp(k, "ct_muon_apply_f32"))
        ct_muon_apply_f32(F(0), (double *)P(1), F(2), F(3), F(4), I(5), I(6), D(7), R(8));
    else if (!strcmp(k, "ct_jsd_rows_f32"))
        ct_jsd_rows_f32(F(0), P(1), F(2), I(3), I(4), I(5), R(6), R(7));
    else if (!strcmp(k, "ct_jsd_grad_f32"))
        ct_jsd_grad_f32(F(0), P(1), F(2), F(3), I(4), I(5), I(6), R(7), R(8));
    else if (!strcmp(k, "ct_dropout_f32"))
        ct_dropout_f32(F(0), P(1), F(2), X(3), I(4), I(5), R(6));
    else if (!strcmp(k, "ct_all_finite_f32"))
        ct_all_finite_f32(F(0), F(1), I(2));
    else if (!strcmp(k, "ct_soft_ce_rows_f32"))
        ct_soft_ce_rows_f32(F(0), F(1), F(2), I(3), I(4));
    else if (!strcmp(k, "ct_soft_ce_grad_f32"))
        ct_soft_ce_grad_f32(F(0), F(1), F(2), F(3), I(4), I(5));
    else if (!strcmp(k, "ct_image_normalize_f32"))
        ct_image_normalize_f32(P(0), F(1), X(2), D(3), D(4), D(5), D(6), D(7), D(8), D(9), D(10));
    else if (!strcmp(k, "ct_random_erase_f32"))
        ct_random_erase_f32(F(0), P(1), F(2), X(3), I(4), (int)I(5));
    else if (!strcmp(k, "ct_mix_images_f32"))
        ct_mix_images_f32(F(0), F(1), F(2), X(3));
    else if (!strcmp(k, "ct_gather_f32"))
        ct_gather_f32(F(0), P(1), P(2), F(3), I(4), I(5), I(6), I(7));
    else if (!strcmp(k, "ct_gather_grad_f32"))
        ct_gather_grad_f32(F(0), P(1), P(2), F(3), I(4), I(5), I(6), I(7));
    else
        CHECKF(0, "no host dispatch for %s", k);
}

typedef struct Case {
    Graph g;
    int node;
} Case;

static ValueId input(Case *c, const char *name, int ndim, const int64_t *d, int nhwc, CtDType t)
{
    ValueId v = graph_add_value(&c->g, (CtType){shape_make(ndim, d), t}, CT_ROLE_INPUT, name);
    c->g.values[v].layout = nhwc && ndim == 4 ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
    return v;
}

/* Adds the case's node; its outputs take layout `nhwc` (4-D ones). */
static int add_node(Case *c, CtOp op, int nin, const ValueId *in, const int64_t *a, int na, const double *f, int nf,
                    int nhwc)
{
    Node n = {.op = op, .nin = nin};
    CtErr err;
    memcpy(n.in, in, sizeof *in * (size_t)nin);
    if (na)
        memcpy(n.iattr, a, sizeof *a * (size_t)na);
    if (nf)
        memcpy(n.fattr, f, sizeof *f * (size_t)nf);
    c->node = graph_add_node(&c->g, &n, "t", &err);
    CHECKF(c->node >= 0, "%s", err.msg);
    if (c->node < 0)
        return -1;
    const Node *m = &c->g.nodes[c->node];
    for (int k = 0; k < m->nout; k++) {
        Value *v = &c->g.values[m->out[k]];
        v->layout = nhwc && v->type.shape.ndim == 4 ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
        graph_mark_output(&c->g, m->out[k]);
    }
    return 0;
}

/* Logical row-major element i of value v <-> its physical offset. */
static int64_t phys(const Value *v, int64_t i)
{
    int64_t st[CT_MAX_DIMS], off = 0;
    value_strides(v, st);
    for (int d = v->type.shape.ndim - 1; d >= 0; d--) {
        off += (i % v->type.shape.d[d]) * st[d];
        i /= v->type.shape.d[d];
    }
    return off;
}

static double gen(int64_t i, int k, const char *name)
{
    double u = sin(0.7 * (double)i + 1.3 * k + 0.1) * 0.9;
    return name && !strcmp(name, "rv") ? 0.5 + fabs(u) : u;
}

/* Input values put over gen()'s: element `at` of the first input (last 0)
 * or of the last float input (last 1), where it has that many. */
typedef struct Poison {
    int last;
    int64_t at;
    double v;
} Poison;

static const Poison *poison;
static int npoison;

/* A case of layer_norm's prologue (lib_layer_norm_fused): the norm's input
 * the sum x + r; `alias`: the sum stored over x and the norm's output over
 * r, as the memory plan may place them. */
typedef struct LnRes {
    ValueId x, r, sum;
    int alias;
} LnRes;

static const LnRes *ln_res;

/* The multiprocessors the launches are made for (fewer make fewer,
 * longer partial sums). */
static int case_sms = 132;

/* A case whose last node the depthwise convolution dw_first computes too
 * (lib_dw_conv's `next`), or -1. */
static int dw_first = -1;

/* A training batch_norm case run as the launch plan runs one whose
 * convolution's step makes its sums: lib_bn_conv_sums' pass (sums at kept
 * byte 0), then its step's launches from those sums. */
static int bn_summed;

static int summed_launches(const Graph *g, const Node *n, LibLaunch *l, int *nl, size_t *scratch, CtErr *err)
{
    LibBnCoef kc = {.at = -1, .sums = 0};
    int node = (int)(n - g->nodes), a, b, tail;
    size_t s0, s1;
    FuseStep st = {.kind = FUSE_LIBRARY, .first = 0, .n = 1};
    FusePlan p = {.steps = &st, .nsteps = 1, .nodes = &node};
    if (lib_bn_conv_sums(g, case_sms, n, kc, l, &a, &s0, err) ||
        lib_batch_norm_step(g, case_sms, &p, &st, kc, NULL, (LibBnRes){-1, -1}, 0, l + a, &b, &s1, &tail, err))
        return -1;
    CHECKF(a == 1 && b == 2 && !strcmp(l[1].kernel, "ct_bn_coef_sums_f32") && l[0].arg[l[0].nargs - 1].kind == LA_KEPT,
           "%s then %s: not a statistics pass's sums, then coefficients from them", l[0].kernel, l[1].kernel);
    *nl = a + b;
    *scratch = s0 > s1 ? s0 : s1;
    return 0;
}

/* Element i of value val, input k of the case (its last float input: last_float). */
static float input_value(const Value *val, int64_t i, int k, int last_float)
{
    float x = (float)gen(i, k, val->name);
    for (int p = 0; p < npoison; p++)
        if (poison[p].at == i && k == (poison[p].last ? last_float : 0))
            x = (float)poison[p].v;
    return x;
}

/* T of gather and gather_grad node n: the rows its index picks from. */
static int64_t gather_rows(const Graph *g, const Node *n)
{
    return n->op == CT_OP_gather ? g->values[n->in[0]].type.shape.d[n->iattr[0]] : n->iattr[1];
}

/* Runs the case on ref and on the launches, and compares every output. */
static void check_case(Case *c, const char *what)
{
    const Graph *g = &c->g;
    const Node *n = &g->nodes[c->node];
    CtTensor in[CT_MAX_IN], out[CT_MAX_OUT];
    void **mem = calloc((size_t)g->nvalues, sizeof *mem);
    CT_ASSERT(mem != NULL);
    int nin = 0, ninputs = 0, last_float = 0;
    for (ValueId v = 0; v < g->nvalues; v++)
        if (g->values[v].role == CT_ROLE_INPUT) {
            if (ct_dtype_is_float(g->values[v].type.dtype))
                last_float = ninputs;
            ninputs++;
        }
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        int64_t count = shape_numel(&val->type.shape);
        mem[v] = calloc((size_t)count + 1, 8);
        CT_ASSERT(mem[v] != NULL);
        if (val->role != CT_ROLE_INPUT)
            continue;
        tensor_alloc(&in[nin], val->type);
        for (int64_t i = 0; i < count; i++) {
            if (val->type.dtype == CT_I32) { /* gather's: -1 .. T, two of them out of range */
                int32_t t = (int32_t)((i * 7 + 3) % (gather_rows(g, n) + 2) - 1);
                ((int32_t *)in[nin].data)[i] = ((int32_t *)mem[v])[i] = t;
            } else if (val->type.dtype == CT_I64) {
                int64_t t = n->op == CT_OP_gather || n->op == CT_OP_gather_grad
                                ? (i * 7 + 3) % (gather_rows(g, n) + 2) - 1
                                : (i * 7 + 3) % g->values[n->in[0]].type.shape.d[1];
                ((int64_t *)in[nin].data)[i] = ((int64_t *)mem[v])[i] = t;
            } else {
                float x = input_value(val, i, nin, last_float);
                ((float *)in[nin].data)[i] = x;
                ((float *)mem[v])[phys(val, i)] = x;
            }
        }
        nin++;
    }
    CtState st;
    CtErr err;
    state_create(&st, g);
    LibLaunch l[LIB_MAX_LAUNCHES];
    int nl;
    size_t scratch_bytes;
    if (backend_run_once(&ct_backend_ref, g, &st, in, nin, out, NULL, &err)) {
        CHECKF(0, "%s: ref: %s", what, err.msg);
    } else if (ln_res ? (scratch_bytes = 0, lib_layer_norm_fused(g, n, ln_res->x, ln_res->r, ln_res->sum, -1, l, &nl, &err))
               : dw_first >= 0 ? lib_dw_conv(g, case_sms, &g->nodes[dw_first], n, l, &nl, &scratch_bytes, &err)
               : bn_summed     ? summed_launches(g, n, l, &nl, &scratch_bytes, &err)
                               : lib_launches(g, case_sms, n, l, &nl, &scratch_bytes, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        for (int k = 0; k < g->noutputs; k++)
            tensor_free(&out[k]);
    } else {
        float *scratch = calloc(scratch_bytes / sizeof(float) + 1, sizeof(float));
        float kept[2 * 64] = {0}; /* a summed batch norm's sums */
        unsigned counters[4096] = {0};
        CT_ASSERT(scratch != NULL);
        ValueId stored[2] = {ln_res && ln_res->alias ? ln_res->sum : -1, ln_res ? n->out[0] : -1};
        ValueId over[2] = {ln_res ? ln_res->x : -1, ln_res ? ln_res->r : -1};
        for (int j = 0; j < nl; j++) {
            void *args[LIB_MAX_ARGS] = {0};
            for (int a = 0; a < l[j].nargs; a++) {
                ValueId v = l[j].arg[a].v;
                for (int k = 0; ln_res && ln_res->alias && k < 2; k++)
                    v = l[j].arg[a].v == stored[k] ? over[k] : v;
                CT_ASSERT(l[j].arg[a].kind != LA_COUNTERS || l[j].arg[a].i <= 4096);
                args[a] = l[j].arg[a].kind == LA_VALUE      ? mem[v]
                          : l[j].arg[a].kind == LA_SCRATCH  ? (void *)((char *)scratch + l[j].arg[a].i)
                          : l[j].arg[a].kind == LA_COUNTERS ? (void *)counters
                          : l[j].arg[a].kind == LA_KEPT     ? (void *)((char *)kept + l[j].arg[a].i)
                                                            : NULL;
            }
            run_launch(&l[j], args);
        }
        for (int k = 0; ln_res && ln_res->alias && k < 2; k++) /* what the launches stored in the operands' place */
            memcpy(mem[stored[k]], mem[over[k]], (size_t)shape_numel(&g->values[over[k]].type.shape) * sizeof(float));
        for (int k = 0; k < g->noutputs; k++) {
            const Value *val = &g->values[g->outputs[k]];
            double num = 0, den = 0;
            int64_t odd = 0; /* NaN or infinite where ref has not that value */
            for (int64_t i = 0; i < shape_numel(&val->type.shape); i++) {
                double want = ((float *)out[k].data)[i], got = ((float *)mem[g->outputs[k]])[phys(val, i)];
                if (!isfinite(want) || !isfinite(got)) {
                    odd += !(isnan(want) && isnan(got)) && got != want;
                    continue;
                }
                num += (got - want) * (got - want);
                den += want * want;
            }
            double rel = sqrt(num / (den > 0 ? den : 1));
            CHECKF(rel <= 1e-5, "%s output %d: relative error %.3g", what, k, rel);
            CHECKF(odd == 0, "%s output %d: %lld NaN or infinite values unlike ref's%s", what, k, (long long)odd,
                   npoison ? " (NaN and infinities in the inputs)" : "");
            tensor_free(&out[k]);
        }
        free(scratch);
    }
    for (int k = 0; k < nin; k++)
        tensor_free(&in[k]);
    for (ValueId v = 0; v < g->nvalues; v++)
        free(mem[v]);
    free(mem);
    state_free(&st);
    graph_free(&c->g);
}

/* The work items of the case's first launch. */
static long long first_items(Case *c)
{
    LibLaunch l[LIB_MAX_LAUNCHES];
    int nl;
    size_t scratch_bytes;
    CtErr err;
    if (lib_launches(&c->g, 132, &c->g.nodes[c->node], l, &nl, &scratch_bytes, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    return l[0].items;
}

static void test_data_movement(void)
{
    static const int64_t x4[] = {2, 3, 4, 5};
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        Case c;
        graph_init(&c.g);
        ValueId x = input(&c, "x", 4, x4, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_permute, 1, &x, (int64_t[]){4, 0, 2, 3, 1}, 5, NULL, 0, 0))
            check_case(&c, nhwc ? "permute from NHWC" : "permute");
        graph_init(&c.g);
        x = input(&c, "x", 4, x4, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_to_layout, 1, &x, (int64_t[]){!nhwc}, 1, NULL, 0, !nhwc))
            check_case(&c, nhwc ? "to_layout NCHW" : "to_layout NHWC");
        graph_init(&c.g);
        x = input(&c, "x", 4, x4, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_slice, 1, &x, (int64_t[]){2, 1, 4, 2}, 4, NULL, 0, nhwc))
            check_case(&c, "slice");
        graph_init(&c.g);
        x = input(&c, "x", 4, (int64_t[]){2, 3, 2, 5}, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_slice_grad, 1, &x, (int64_t[]){2, 1, 5, 2, 6}, 5, NULL, 0, nhwc))
            check_case(&c, "slice_grad");
        /* SAME's asymmetric amounts (a value other than the outputs' zeroed
         * memory); a crop and a pad of -inf (max pooling's SAME) into the
         * other layout; rows all of the value, with no copy */
        static const struct {
            int64_t a[4];
            double value;
            int flip;
        } pads[] = {{{0, 1, 1, 2}, 0.25, 0}, {{-1, 2, -2, 1}, -INFINITY, 1}, {{-5, 6, 1, 1}, 0.5, 0}};
        for (size_t i = 0; i < sizeof pads / sizeof *pads; i++) {
            graph_init(&c.g);
            x = input(&c, "x", 4, x4, nhwc, CT_F32);
            if (!add_node(&c, CT_OP_pad, 1, &x, pads[i].a, 4, &pads[i].value, 1, nhwc != pads[i].flip))
                check_case(&c, "pad");
        }
        graph_init(&c.g);
        x = input(&c, "x", 4, x4, nhwc, CT_F32);
        ValueId y = input(&c, "y", 4, (int64_t[]){2, 2, 4, 5}, !nhwc, CT_F32);
        if (!add_node(&c, CT_OP_concat, 2, (ValueId[]){x, y}, (int64_t[]){1}, 1, NULL, 0, nhwc))
            check_case(&c, "concat");
        graph_init(&c.g);
        x = input(&c, "x", 4, x4, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_reshape, 1, &x, (int64_t[]){2, 2, 60}, 3, NULL, 0, 0))
            check_case(&c, "reshape");
        /* ct_copy's 16-byte path (ct_copy_vec: 4 f32 elements a work item
         * here) over [2, 6, 4, 8]: a slice along C (NCHW: runs of 96; NHWC:
         * of 3 channels, element by element), along W from 4 (runs of 4, or
         * NHWC of 24), along W from 1 (not a multiple of 4: element by
         * element in both), and a concat along C (NHWC: runs of 6) */
        static const int64_t x8[] = {2, 6, 4, 8};
        static const struct {
            int64_t a[4], items[2]; /* NCHW's, NHWC's */
        } vslices[] = {{{1, 2, 5, 1}, {48, 192}}, {{3, 4, 8, 1}, {48, 48}}, {{3, 1, 5, 1}, {192, 192}}};
        for (int i = 0; i < 3; i++) {
            graph_init(&c.g);
            x = input(&c, "x", 4, x8, nhwc, CT_F32);
            if (!add_node(&c, CT_OP_slice, 1, &x, vslices[i].a, 4, NULL, 0, nhwc)) {
                long long items = first_items(&c);
                CHECKF(items == vslices[i].items[nhwc], "slice %d of [2,6,4,8]%s: %lld work items, not %lld", i,
                       nhwc ? " NHWC" : "", items, (long long)vslices[i].items[nhwc]);
                check_case(&c, "slice of [2,6,4,8]");
            }
        }
        graph_init(&c.g);
        x = input(&c, "x", 4, x8, nhwc, CT_F32);
        y = input(&c, "y", 4, (int64_t[]){2, 2, 4, 8}, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_concat, 2, (ValueId[]){x, y}, (int64_t[]){1}, 1, NULL, 0, nhwc)) {
            long long items = first_items(&c);
            CHECKF(items == (nhwc ? 384 : 96), "concat along C%s: %lld work items", nhwc ? " NHWC" : "", items);
            check_case(&c, "concat of [2,6,4,8] and [2,2,4,8]");
        }
        /* one stage (60 outputs of 2 terms), column sums (3 of 40: one
         * slice in NCHW, two in NHWC, whose rows start inside the runs of 5
         * along W); each also of a product x * f (squeeze-excitation's
         * scale's gradient over H, W) */
        for (int mask = 0; mask < 2; mask++)
            for (int nin = 1; nin <= 2; nin++) {
                char what[64];
                graph_init(&c.g);
                ValueId xf[2] = {input(&c, "x", 4, x4, nhwc, CT_F32), input(&c, "f", 4, x4, nhwc, CT_F32)};
                snprintf(what, sizeof what, "reduce_sum%s %s", nin > 1 ? " of x * f" : "",
                         mask ? "over N, H, W" : "over N, keepdim");
                if (!add_node(&c, CT_OP_reduce_sum, nin, xf, (int64_t[]){mask ? 0xd : 0x1, mask ? 0 : 1}, 2, NULL, 0,
                              nhwc))
                    check_case(&c, what);
            }
    }
    /* a bias gradient: [3, 70, 6] over its first two dims, column sums in 7
     * slices; and a layer scale's, of a product; with 8 outputs, 4 a work
     * item (ct_sum_vec) */
    for (int c8 = 0; c8 < 2; c8++)
        for (int nin = 1; nin <= 2; nin++) {
            Case c;
            const int64_t d[3] = {3, 70, c8 ? 8 : 6};
            graph_init(&c.g);
            ValueId xf[2] = {input(&c, "x", 3, d, 0, CT_F32), input(&c, "f", 3, d, 0, CT_F32)};
            if (!add_node(&c, CT_OP_reduce_sum, nin, xf, (int64_t[]){0x3, 0}, 2, NULL, 0, 0))
                check_case(&c, nin > 1 ? "reduce_sum of x * f over rows" : "reduce_sum over rows");
        }
}

static void test_rows(void)
{
    for (int nhwc = 0; nhwc < 2; nhwc++)
        for (int dim = 1; dim < 4; dim += 2) {
            Case c;
            graph_init(&c.g);
            ValueId x = input(&c, "x", 4, (int64_t[]){2, 3, 4, 5}, nhwc, CT_F32);
            if (!add_node(&c, CT_OP_softmax, 1, &x, (int64_t[]){dim}, 1, NULL, 0, nhwc))
                check_case(&c, "softmax");
            graph_init(&c.g);
            x = input(&c, "y", 4, (int64_t[]){2, 3, 4, 5}, nhwc, CT_F32);
            ValueId dy = input(&c, "dy", 4, (int64_t[]){2, 3, 4, 5}, nhwc, CT_F32);
            if (!add_node(&c, CT_OP_softmax_grad, 2, (ValueId[]){x, dy}, (int64_t[]){dim}, 1, NULL, 0, nhwc))
                check_case(&c, "softmax_grad");
        }
    /* layer_norm and its gradient, whose dweight and dbias sum 10 rows in
     * one slice, then 69 in three (whose rows cross the runs of 23 along
     * the second dim); rows of 8 are held in registers
     * (ct_ln_vec), up to 4 a lane on the device (ct_layer_norm_grad_x_rows),
     * rows of 640 one a lane (ct_layer_norm_grad_x), rows of 6 are not */
    static const int64_t ln[][3] = {{2, 5, 8}, {3, 23, 8}, {2, 3, 640}, {2, 5, 6}};
    for (int i = 0; i < 4; i++) {
        Case c;
        graph_init(&c.g);
        ValueId x = input(&c, "x", 3, ln[i], 0, CT_F32), w = input(&c, "w", 1, &ln[i][2], 0, CT_F32);
        ValueId b = input(&c, "b", 1, &ln[i][2], 0, CT_F32);
        if (!add_node(&c, CT_OP_layer_norm, 3, (ValueId[]){x, w, b}, NULL, 0, (double[]){1e-6}, 1, 0))
            check_case(&c, "layer_norm");
        graph_init(&c.g);
        x = input(&c, "x", 3, ln[i], 0, CT_F32), w = input(&c, "w", 1, &ln[i][2], 0, CT_F32);
        ValueId dy = input(&c, "dy", 3, ln[i], 0, CT_F32);
        if (!add_node(&c, CT_OP_layer_norm_grad, 3, (ValueId[]){x, w, dy}, NULL, 0, (double[]){1e-6}, 1, 0))
            check_case(&c, "layer_norm_grad");
        for (int alias = 0; alias < 2; alias++) { /* the residual add before it, its sum stored over x or apart */
            graph_init(&c.g);
            x = input(&c, "x", 3, ln[i], 0, CT_F32), w = input(&c, "w", 1, &ln[i][2], 0, CT_F32);
            b = input(&c, "b", 1, &ln[i][2], 0, CT_F32);
            ValueId r = input(&c, "r", 3, ln[i], 0, CT_F32);
            if (add_node(&c, CT_OP_add, 2, (ValueId[]){x, r}, NULL, 0, NULL, 0, 0))
                continue;
            LnRes lr = {x, r, c.g.nodes[c.node].out[0], alias};
            if (!add_node(&c, CT_OP_layer_norm, 3, (ValueId[]){lr.sum, w, b}, NULL, 0, (double[]){1e-6}, 1, 0)) {
                ln_res = &lr;
                check_case(&c, alias ? "layer_norm of a residual add, in place" : "layer_norm of a residual add");
                ln_res = NULL;
            }
        }
    }
}

/* batch_norm and its gradient over 3 channels, and over 8, which in NHWC
 * take 4 channels a work item (ct_bn_vec) */
static void test_batch_norm(void)
{
    for (int wide = 0; wide < 2; wide++)
        for (int nhwc = 0; nhwc < 2; nhwc++)
            for (int training = 0; training < 2; training++) {
                const int64_t x4[] = {2, wide ? 8 : 3, 4, 5}, c1[] = {x4[1]};
                Case c;
                graph_init(&c.g);
                ValueId x = input(&c, "x", 4, x4, nhwc, CT_F32), w = input(&c, "w", 1, c1, 0, CT_F32);
                ValueId b = input(&c, "b", 1, c1, 0, CT_F32), rm = input(&c, "rm", 1, c1, 0, CT_F32);
                ValueId rv = input(&c, "rv", 1, c1, 0, CT_F32);
                if (!add_node(&c, CT_OP_batch_norm, 5, (ValueId[]){x, w, b, rm, rv}, (int64_t[]){training}, 1,
                              (double[]){0.1, 1e-5}, 2, nhwc))
                    check_case(&c, training ? "batch_norm training" : "batch_norm eval");
                /* its statistics from the sums a convolution's step makes (here the pass it falls back on) */
                graph_init(&c.g);
                x = input(&c, "x", 4, x4, nhwc, CT_F32), w = input(&c, "w", 1, c1, 0, CT_F32);
                b = input(&c, "b", 1, c1, 0, CT_F32), rm = input(&c, "rm", 1, c1, 0, CT_F32);
                rv = input(&c, "rv", 1, c1, 0, CT_F32);
                bn_summed = training;
                if (training && !add_node(&c, CT_OP_batch_norm, 5, (ValueId[]){x, w, b, rm, rv},
                                          (int64_t[]){training}, 1, (double[]){0.1, 1e-5}, 2, nhwc))
                    check_case(&c, "batch_norm training from its convolution's sums");
                else
                    graph_free(&c.g);
                bn_summed = 0;
                graph_init(&c.g);
                x = input(&c, "x", 4, x4, nhwc, CT_F32), w = input(&c, "w", 1, c1, 0, CT_F32);
                rm = input(&c, "rm", 1, c1, 0, CT_F32), rv = input(&c, "rv", 1, c1, 0, CT_F32);
                ValueId dy = input(&c, "dy", 4, x4, nhwc, CT_F32);
                if (!add_node(&c, CT_OP_batch_norm_grad, 5, (ValueId[]){x, w, rm, rv, dy}, (int64_t[]){training}, 1,
                              (double[]){1e-5}, 1, nhwc))
                    check_case(&c, training ? "batch_norm_grad training" : "batch_norm_grad eval");
            }
}

/* group_norm and its gradient in NCHW and NHWC: groups of several
 * channels, of one (groups = C) and all channels in one group; and a 3-D
 * input. Each with the affine, with a weight only and without (null
 * pointers): the gradient of the last is group_norm_grad(x, dy). */
static void test_group_norm(void)
{
    static const struct {
        int ndim;
        int64_t d[4], groups;
    } cases[] = {{4, {2, 6, 3, 4}, 3}, {4, {2, 6, 3, 4}, 6}, {4, {2, 6, 3, 4}, 1}, {3, {2, 4, 7}, 2}};
    for (int nhwc = 0; nhwc < 2; nhwc++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            for (int nin = 1; nin <= 3; nin++) {
                if (nhwc && cases[i].ndim != 4)
                    continue;
                int64_t c1[] = {cases[i].d[1]};
                Case c;
                graph_init(&c.g);
                ValueId in[3] = {input(&c, "x", cases[i].ndim, cases[i].d, nhwc, CT_F32),
                                 input(&c, "w", 1, c1, 0, CT_F32), input(&c, "b", 1, c1, 0, CT_F32)};
                if (!add_node(&c, CT_OP_group_norm, nin, in, &cases[i].groups, 1, (double[]){1e-5}, 1, nhwc))
                    check_case(&c, "group_norm");
                if (nin == 2)
                    continue;
                graph_init(&c.g);
                in[0] = input(&c, "x", cases[i].ndim, cases[i].d, nhwc, CT_F32);
                in[1] = input(&c, "w", 1, c1, 0, CT_F32);
                in[2] = input(&c, "dy", cases[i].ndim, cases[i].d, nhwc, CT_F32);
                if (nin == 1)
                    in[1] = in[2];
                if (!add_node(&c, CT_OP_group_norm_grad, nin == 3 ? 3 : 2, in, &cases[i].groups, 1,
                              (double[]){1e-5}, 1, nhwc))
                    check_case(&c, "group_norm_grad");
            }
}

/* cross_entropy and its gradient, label smoothing 0.1 and none */
static void test_loss(void)
{
    for (int smoothing = 0; smoothing < 2; smoothing++)
        for (int grad = 0; grad < 2; grad++) {
            Case c;
            graph_init(&c.g);
            ValueId x = input(&c, "x", 2, (int64_t[]){4, 7}, 0, CT_F32);
            ValueId t = input(&c, "t", 1, (int64_t[]){4}, 0, CT_I64);
            ValueId dl = grad ? input(&c, "dl", 0, (int64_t[]){1}, 0, CT_F32) : -1;
            if (!add_node(&c, grad ? CT_OP_cross_entropy_grad : CT_OP_cross_entropy, 2 + grad, (ValueId[]){x, t, dl},
                          NULL, 0, (double[]){smoothing ? 0.1 : 0}, 1, 0))
                check_case(&c, grad ? "cross_entropy_grad" : "cross_entropy");
        }
    /* dropout and drop_path: the masks of (counter, node, logical index), in both layouts */
    for (int nhwc = 0; nhwc < 2; nhwc++)
        for (int path = 0; path < 2; path++) {
            Case c;
            graph_init(&c.g);
            ValueId x = input(&c, "x", 4, (int64_t[]){3, 4, 5, 6}, nhwc, CT_F32);
            ValueId k = input(&c, "k", 0, (int64_t[]){1}, 0, CT_I64);
            if (!add_node(&c, path ? CT_OP_drop_path : CT_OP_dropout, 2, (ValueId[]){x, k}, (int64_t[]){7}, 1,
                          (double[]){0.3}, 1, nhwc))
                check_case(&c, path ? "drop_path" : "dropout");
        }
    /* all_finite over a gradient (the poisoned rounds put NaN and infinities in it) */
    {
        Case c;
        graph_init(&c.g);
        ValueId x = input(&c, "x", 2, (int64_t[]){4, 7}, 0, CT_F32);
        if (!add_node(&c, CT_OP_all_finite, 1, &x, NULL, 0, NULL, 0, 0))
            check_case(&c, "all_finite");
    }
    /* the optimizer updates with whole-tensor norms or scalar state:
     * LAMB with and without clipping (decoupled, trust clip), LARS plain
     * and nesterov with trust clip, NAdam and its legacy product, each with
     * and without apply; 2 chunks of ct_sq_partials for p [3, 2000] */
    for (int v = 0; v < 4; v++)
        for (int apply = 0; apply < 2; apply++) {
            Case c;
            graph_init(&c.g);
            int64_t d[2] = {3, v & 1 ? 2000 : 7};
            ValueId p = input(&c, "p", 2, d, 0, CT_F32), g = input(&c, "g", 2, d, 0, CT_F32);
            ValueId m = input(&c, "m", 2, d, 0, CT_F32), sq = input(&c, "rv", 2, d, 0, CT_F32);
            ValueId lr = input(&c, "lr", 0, d, 0, CT_F32), step = input(&c, "step", 0, d, 0, CT_I64);
            ValueId clip = input(&c, "rv", 0, d, 0, CT_F32), ap = input(&c, "apply", 0, d, 0, CT_F32);
            int has_clip = v < 2;
            ValueId in[8] = {p, g, m, sq, lr, step, has_clip ? clip : ap, ap};
            if (!add_node(&c, CT_OP_lamb_update, 6 + has_clip + apply, in, (int64_t[]){v == 1, v == 3, has_clip, v & 1},
                          4, (double[]){0.9, 0.999, 1e-6, 0.02}, 4, 0))
                check_case(&c, "lamb_update");
            graph_init(&c.g);
            p = input(&c, "p", 2, d, 0, CT_F32), g = input(&c, "g", 2, d, 0, CT_F32);
            m = input(&c, "buf", 2, d, 0, CT_F32), lr = input(&c, "rv", 0, d, 0, CT_F32);
            ap = input(&c, "apply", 0, d, 0, CT_F32);
            if (!add_node(&c, CT_OP_lars_update, 4 + apply, (ValueId[]){p, g, m, lr, ap},
                          (int64_t[]){v & 1, v >= 2, v == 2}, 3, (double[]){v == 3 ? 0 : 0.9, 1e-4, 1e-3, 1e-8}, 4, 0))
                check_case(&c, "lars_update");
            graph_init(&c.g);
            p = input(&c, "p", 2, d, 0, CT_F32), g = input(&c, "g", 2, d, 0, CT_F32);
            m = input(&c, "m", 2, d, 0, CT_F32), sq = input(&c, "rv", 2, d, 0, CT_F32);
            ValueId mu = input(&c, "rv", 0, d, 0, CT_F32);
            lr = input(&c, "lr", 0, d, 0, CT_F32), step = input(&c, "step", 0, d, 0, CT_I64);
            ap = input(&c, "apply", 0, d, 0, CT_F32);
            if (!add_node(&c, CT_OP_nadam_update, 7 + apply, (ValueId[]){p, g, m, sq, mu, lr, step, ap},
                          (int64_t[]){v & 1}, 1, (double[]){0.9, 0.999, 1e-8, 1e-4}, 4, 0))
                check_case(&c, "nadam_update");
        }
    /* SGDP on a [6, 40] and a [40] param, AdamP on the first (the harness
     * fills an i64 step from the param's second dim), nesterov and not, with
     * apply: the launches' arguments and the unprojected path (test_optim_norm
     * runs their projections against timm through the cuda-sim) */
    for (int v = 0; v < 2; v++)
        for (int adamp = 0; adamp < 2 - v; adamp++) {
            Case c;
            graph_init(&c.g);
            int64_t d[2] = {6, 40};
            int nd = v ? 1 : 2;
            const int64_t *sh = v ? d + 1 : d;
            ValueId p = input(&c, "p", nd, sh, 0, CT_F32), g = input(&c, "g", nd, sh, 0, CT_F32);
            ValueId m = input(&c, "m", nd, sh, 0, CT_F32), sq = adamp ? input(&c, "rv", nd, sh, 0, CT_F32) : -1;
            ValueId lr = input(&c, "lr", 0, d, 0, CT_F32), step = adamp ? input(&c, "step", 0, d, 0, CT_I64) : -1;
            ValueId ap = input(&c, "apply", 0, d, 0, CT_F32);
            if (adamp ? !add_node(&c, CT_OP_adamp_update, 7, (ValueId[]){p, g, m, sq, lr, step, ap}, (int64_t[]){v}, 1,
                                  (double[]){0.9, 0.999, 1e-8, 0.01, 0.1, 0.1}, 6, 0)
                      : !add_node(&c, CT_OP_sgdp_update, 5, (ValueId[]){p, g, m, lr, ap}, (int64_t[]){v}, 1,
                                  (double[]){0.9, 1e-4, 0.1, 0.1, 1e-8}, 5, 0))
                check_case(&c, adamp ? "adamp_update" : "sgdp_update");
        }
    /* JSD: 2 splits unsmoothed, 3 smoothed, of 4 samples */
    for (int splits = 2; splits <= 3; splits++)
        for (int grad = 0; grad < 2; grad++) {
            Case c;
            graph_init(&c.g);
            ValueId x = input(&c, "x", 2, (int64_t[]){4 * splits, 7}, 0, CT_F32);
            ValueId t = input(&c, "t", 1, (int64_t[]){4 * splits}, 0, CT_I64);
            ValueId dl = grad ? input(&c, "dl", 0, (int64_t[]){1}, 0, CT_F32) : -1;
            if (!add_node(&c, grad ? CT_OP_jsd_cross_entropy_grad : CT_OP_jsd_cross_entropy, 2 + grad,
                          (ValueId[]){x, t, dl}, (int64_t[]){splits}, 1, (double[]){splits == 3 ? 0.1 : 0, 12}, 2, 0))
                check_case(&c, grad ? "jsd_cross_entropy_grad" : "jsd_cross_entropy");
        }
    /* BCE: class labels (smoothing, threshold) and probabilities; plain,
     * binarised, and with a positive weight summed over classes */
    for (int probs = 0; probs < 2; probs++)
        for (int grad = 0; grad < 2; grad++)
            for (int thr = 0; thr < 3; thr++) {
                Case c;
                graph_init(&c.g);
                ValueId x = input(&c, "x", 2, (int64_t[]){4, 7}, 0, CT_F32);
                ValueId t = probs ? input(&c, "t", 2, (int64_t[]){4, 7}, 0, CT_F32)
                                  : input(&c, "t", 1, (int64_t[]){4}, 0, CT_I64);
                ValueId dl = grad ? input(&c, "dl", 0, (int64_t[]){1}, 0, CT_F32) : -1;
                if (!add_node(&c, grad ? CT_OP_binary_cross_entropy_grad : CT_OP_binary_cross_entropy, 2 + grad,
                              (ValueId[]){x, t, dl}, (int64_t[]){thr == 2}, 1,
                              (double[]){0.1, thr == 1 ? 0.2 : -1, thr == 2 ? 2.5 : 0}, 3, 0))
                    check_case(&c, grad ? "binary_cross_entropy_grad" : "binary_cross_entropy");
            }
    /* mixup's soft targets */
    for (int grad = 0; grad < 2; grad++) {
        Case c;
        graph_init(&c.g);
        ValueId x = input(&c, "x", 2, (int64_t[]){4, 7}, 0, CT_F32);
        ValueId t = input(&c, "t", 2, (int64_t[]){4, 7}, 0, CT_F32);
        ValueId dl = grad ? input(&c, "dl", 0, (int64_t[]){1}, 0, CT_F32) : -1;
        if (!add_node(&c, grad ? CT_OP_soft_target_cross_entropy_grad : CT_OP_soft_target_cross_entropy, 2 + grad,
                      (ValueId[]){x, t, dl}, NULL, 0, NULL, 0, 0))
            check_case(&c, grad ? "soft_target_cross_entropy_grad" : "soft_target_cross_entropy");
    }
}

/* A library step's epilogue left to kernels: each activation that can be
 * one (both forms of gelu; over 120 elements, 16 bytes at a time, and
 * over 27, the last 3 one at a time), a bias add (broadcast over the
 * channel) and a residual add, NCHW and NHWC. */
static void test_epilogue(void)
{
    static const int64_t x4[] = {2, 3, 4, 5}, x27[] = {1, 3, 3, 3};
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        Case c;
        for (int op = 0; op < CT_NOPS; op++)
            for (int approx = 0; op_def((CtOp)op)->fusion == OP_ACTIVATION && approx <= (op == CT_OP_gelu); approx++)
                for (int odd = 0; odd < 2; odd++) {
                    graph_init(&c.g);
                    ValueId x = input(&c, "x", 4, odd ? x27 : x4, nhwc, CT_F32);
                    if (!add_node(&c, (CtOp)op, 1, &x, (int64_t[]){approx}, 1, NULL, 0, nhwc))
                        check_case(&c, op_def((CtOp)op)->name);
                }
        for (int bias = 0; bias < 2; bias++) {
            graph_init(&c.g);
            ValueId x = input(&c, "x", 4, x4, nhwc, CT_F32);
            ValueId r = bias ? input(&c, "b", 4, (int64_t[]){1, 3, 1, 1}, nhwc, CT_F32) : input(&c, "r", 4, x4, nhwc, CT_F32);
            if (!add_node(&c, CT_OP_add, 2, (ValueId[]){x, r}, NULL, 0, NULL, 0, nhwc))
                check_case(&c, bias ? "bias add" : "residual add");
        }
        graph_init(&c.g); /* a cast epilogue's kernel, here f32 to f32 (cuda-sim runs the 16-bit ones) */
        ValueId x = input(&c, "x", 4, x4, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_cast, 1, &x, (int64_t[]){CT_F32}, 1, NULL, 0, nhwc))
            check_case(&c, "cast");
    }
}

/* Pooling and its gradients: 3x3 stride 2 pad 1 max (resnet's stem), 3x3
 * stride 2 ceil_mode average with and without the padding counted, 2x2
 * average, adaptive to 1x1 and to 3x2; NCHW and NHWC, x [2, ch, 7, 6]. */
static void test_pool_of(int64_t ch)
{
    const int64_t x4[] = {2, ch, 7, 6};
    static const struct {
        CtOp op, grad;
        int64_t a[8];
        int na;
    } cases[] = {
        {CT_OP_max_pool2d, CT_OP_max_pool2d_grad, {3, 3, 2, 2, 1, 1, 0}, 7},
        {CT_OP_avg_pool2d, CT_OP_avg_pool2d_grad, {3, 3, 2, 2, 1, 1, 1, 1}, 8},
        {CT_OP_avg_pool2d, CT_OP_avg_pool2d_grad, {3, 3, 2, 2, 1, 1, 1, 0}, 8},
        {CT_OP_avg_pool2d, CT_OP_avg_pool2d_grad, {2, 2, 2, 2, 0, 0, 0, 1}, 8},
        {CT_OP_adaptive_avg_pool2d, CT_OP_adaptive_avg_pool2d_grad, {1, 1}, 2},
        {CT_OP_adaptive_avg_pool2d, CT_OP_adaptive_avg_pool2d_grad, {3, 2}, 2},
    };
    for (int nhwc = 0; nhwc < 2; nhwc++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            Case c;
            char what[64];
            graph_init(&c.g);
            ValueId x = input(&c, "x", 4, x4, nhwc, CT_F32);
            if (add_node(&c, cases[i].op, 1, &x, cases[i].a, cases[i].na, NULL, 0, nhwc))
                continue;
            CtShape ys = c.g.values[c.g.nodes[c.node].out[0]].type.shape;
            snprintf(what, sizeof what, "%s of %lld channels", op_def(cases[i].op)->name, (long long)ch);
            check_case(&c, what);
            graph_init(&c.g);
            int max = cases[i].op == CT_OP_max_pool2d;
            int64_t a[10];
            memcpy(a, cases[i].a, sizeof cases[i].a);
            int na = cases[i].na;
            if (!max) /* the input size after the forward's attributes */
                a[na++] = x4[2], a[na++] = x4[3];
            ValueId gx = max ? input(&c, "x", 4, x4, nhwc, CT_F32) : -1;
            ValueId dy = input(&c, "dy", 4, ys.d, nhwc, CT_F32);
            snprintf(what, sizeof what, "%s of %lld channels", op_def(cases[i].grad)->name, (long long)ch);
            if (!add_node(&c, cases[i].grad, max ? 2 : 1, max ? (ValueId[]){gx, dy} : (ValueId[]){dy}, a, na, NULL,
                          0, nhwc))
                check_case(&c, what);
        }
}

/* test_pool_of 3 channels, and of 8 (4 a work item in NHWC: ct_pool_vec);
 * a global average pool of 8 channels, 4 a work item in NHWC (ct_sum_vec). */
static void test_pool(void)
{
    test_pool_of(3);
    test_pool_of(8);
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        Case c;
        graph_init(&c.g);
        ValueId x = input(&c, "x", 4, (int64_t[]){2, 8, 7, 6}, nhwc, CT_F32);
        if (!add_node(&c, CT_OP_adaptive_avg_pool2d, 1, &x, (int64_t[]){1, 1}, 2, NULL, 0, nhwc))
            check_case(&c, "adaptive_avg_pool2d of 8 channels to 1x1");
    }
}

/* A depthwise convolution over channels-last values (ct_dw_conv*: C
 * channels, filter R x S) and its two gradients: with and without a
 * bias, strides 1 and 2, symmetric and uneven padding, dilation, a filter
 * of one row, the widest taken (7); every output width a partial last
 * work item of CT_DW_QT outputs somewhere. With `sms` 1 and 64 channels the
 * filter gradient's first stage sums several rows a work item, the last
 * of them short. (NCHW values are refused: test_refusals.) */
static void test_dw_conv_of(int64_t C, int sms)
{
    static const struct {
        int64_t r, s, a[7];
        int bias;
    } cases[] = {
        {3, 3, {1, 1, 1, 1, 1, 1, 0}, 1}, {5, 5, {2, 2, 2, 2, 1, 1, 0}, 0}, {7, 7, {1, 1, 3, 3, 1, 1, 0}, 1},
        {3, 3, {2, 1, 2, 2, 2, 2, 0}, 0}, {3, 5, {1, 2, 1, 2, 1, 1, 0}, 1}, {1, 7, {1, 1, 0, 3, 1, 1, 0}, 0},
        {3, 3, {2, 2, 0, 0, 1, 1, 0}, 1},
    };
    const int64_t xs[] = {2, C, 9, 11};
    case_sms = sms;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t a[9], ws[] = {C, 1, cases[i].r, cases[i].s};
        memcpy(a, cases[i].a, sizeof cases[i].a);
        a[6] = C;
        char what[96];
        snprintf(what, sizeof what, "depthwise %lldx%lld conv2d, %lld channels, case %zu", (long long)ws[2],
                 (long long)ws[3], (long long)C, i);
        Case c;
        graph_init(&c.g);
        ValueId in[3] = {input(&c, "x", 4, xs, 1, CT_F32), input(&c, "w", 4, ws, 0, CT_F32),
                         input(&c, "b", 1, (int64_t[]){C}, 0, CT_F32)};
        if (add_node(&c, CT_OP_conv2d, cases[i].bias ? 3 : 2, in, a, 7, NULL, 0, 1))
            continue;
        CtShape ys = c.g.values[c.g.nodes[c.node].out[0]].type.shape;
        check_case(&c, what);
        a[7] = xs[2], a[8] = xs[3];
        graph_init(&c.g);
        ValueId gi[2] = {input(&c, "dy", 4, ys.d, 1, CT_F32), input(&c, "w", 4, ws, 0, CT_F32)};
        snprintf(what, sizeof what, "depthwise %lldx%lld conv2d_grad_input, case %zu", (long long)ws[2],
                 (long long)ws[3], i);
        if (!add_node(&c, CT_OP_conv2d_grad_input, 2, gi, a, 9, NULL, 0, 1))
            check_case(&c, what);
        a[7] = ws[2], a[8] = ws[3];
        graph_init(&c.g);
        ValueId gw[2] = {input(&c, "x", 4, xs, 1, CT_F32), input(&c, "dy", 4, ys.d, 1, CT_F32)};
        snprintf(what, sizeof what, "depthwise %lldx%lld conv2d_grad_weight, case %zu", (long long)ws[2],
                 (long long)ws[3], i);
        if (!add_node(&c, CT_OP_conv2d_grad_weight, 2, gw, a, 9, NULL, 0, 0))
            check_case(&c, what);
        /* the bias gradient in the filter gradient's passes; the forward's SiLU in its store */
        graph_init(&c.g);
        ValueId bw[2] = {input(&c, "x", 4, xs, 1, CT_F32), input(&c, "dy", 4, ys.d, 1, CT_F32)};
        snprintf(what, sizeof what, "depthwise %lldx%lld conv2d_grad_weight and the bias's, case %zu",
                 (long long)ws[2], (long long)ws[3], i);
        if (!add_node(&c, CT_OP_conv2d_grad_weight, 2, bw, a, 9, NULL, 0, 0)) {
            dw_first = c.node;
            if (!add_node(&c, CT_OP_reduce_sum, 1, &bw[1], (int64_t[]){0xd, 0}, 2, NULL, 0, 0))
                check_case(&c, what);
            dw_first = -1;
        }
        graph_init(&c.g);
        ValueId fw[3] = {input(&c, "x", 4, xs, 1, CT_F32), input(&c, "w", 4, ws, 0, CT_F32),
                         input(&c, "b", 1, (int64_t[]){C}, 0, CT_F32)};
        snprintf(what, sizeof what, "depthwise %lldx%lld conv2d and SiLU, case %zu", (long long)ws[2],
                 (long long)ws[3], i);
        if (!add_node(&c, CT_OP_conv2d, cases[i].bias ? 3 : 2, fw, a, 7, NULL, 0, 1)) {
            dw_first = c.node;
            ValueId y = c.g.nodes[c.node].out[0];
            if (!add_node(&c, CT_OP_silu, 1, &y, NULL, 0, NULL, 0, 1)) {
                c.g.outputs[0] = c.g.outputs[1]; /* SiLU's alone is stored */
                c.g.noutputs = 1;
                check_case(&c, what);
            }
            dw_first = -1;
        }
    }
    case_sms = 132;
}

static void test_dw_conv(void)
{
    test_dw_conv_of(5, 132);
    test_dw_conv_of(64, 1);
}

/* Attention and its gradient, q [2, 3, N, D] over M keys: without a bias,
 * with one [1, H, N, M] (the gradient giving dbias), [B, 1, N, M]
 * (without) and [B, H, N, M]; in one tile of the tiled kernels, in several
 * tiles of queries and keys each with partial last tiles, at the largest
 * head dim of their 32-row tiles (64), in their 16-row tiles (80), at
 * their largest head dim, and with a head dim over it (the fallback
 * kernels). Each also packed (one qkv [2, N, 3, 3, D] and y [2, N, 3, D],
 * self-attention: M = N). Every head dim's shared memory fits the host
 * build's and a launch's 48 KiB. */
static void test_sdpa(void)
{
    for (int64_t D = 1; D <= CT_ATT_D; D++)
        CHECKF(CT_ATT_SMEM(D) <= CT_ATT_SMEM_MOST && CT_ATT_SMEM_FWD(D) <= CT_ATT_SMEM_MOST, "head dim %lld",
               (long long)D);
    CHECK(sizeof(float) * CT_ATT_SMEM_MOST <= 48 * 1024);
    static const int64_t bias[][3] = {{0, 0, 0}, {1, 3, 1}, {2, 1, 0}, {2, 3, 1}};
    static const int64_t sizes[][3] = {{5, 7, 8}, {45, 70, 8}, {33, 17, 64}, {40, 37, 80}, {5, 7, CT_ATT_D},
                                       {5, 7, CT_ATT_D + 8}};
    char what[112];
    for (int packed = 0; packed < 2; packed++)
        for (int z = 0; z < 6; z++)
            for (int i = 0; i < 4; i++)
                for (int grad = 0; grad < 2; grad++) {
                    int64_t N = sizes[z][0], M = packed ? N : sizes[z][1], D = sizes[z][2];
                    Case c;
                    graph_init(&c.g);
                    ValueId in[7];
                    int nin = 0;
                    if (packed) {
                        in[nin++] = input(&c, "qkv", 5, (int64_t[]){2, N, 3, 3, D}, 0, CT_F32);
                    } else {
                        in[nin++] = input(&c, "q", 4, (int64_t[]){2, 3, N, D}, 0, CT_F32);
                        in[nin++] = input(&c, "k", 4, (int64_t[]){2, 3, M, D}, 0, CT_F32);
                        in[nin++] = input(&c, "v", 4, (int64_t[]){2, 3, M, D}, 0, CT_F32);
                    }
                    if (grad) {
                        const char *o[2] = {"dy", "y"};
                        for (int k = 0; k < 2; k++)
                            in[nin++] = packed ? input(&c, o[k], 4, (int64_t[]){2, N, 3, D}, 0, CT_F32)
                                               : input(&c, o[k], 4, (int64_t[]){2, 3, N, D}, 0, CT_F32);
                        in[nin++] = input(&c, "lse", 3, (int64_t[]){2, 3, N}, 0, CT_F32);
                    }
                    if (i)
                        in[nin++] = input(&c, "bias", 4, (int64_t[]){bias[i][0], bias[i][1], N, M}, 0, CT_F32);
                    snprintf(what, sizeof what, "%s%s N %lld M %lld D %lld bias [%lld,%lld]%s",
                             grad ? "sdpa_grad" : "sdpa", packed ? " packed" : "", (long long)N, (long long)M,
                             (long long)D, (long long)bias[i][0], (long long)bias[i][1],
                             grad && i && !bias[i][2] ? " no dbias" : "");
                    int64_t attr[2] = {grad ? bias[i][2] : packed, packed};
                    if (!add_node(&c, grad ? CT_OP_sdpa_grad : CT_OP_sdpa, nin, in, attr, 1 + grad, (double[]){0.35},
                                  1, 0))
                        check_case(&c, what);
                }
}

/* The input ops, on inputs of their own (gen()'s are no uint8 batch,
 * boxes or mixing numbers) of c channels (image_normalize: 3, a gray
 * batch's 1 or an RGBA one's 4): equal to the ref backend in NCHW and NHWC. */
static void check_input_op(CtOp op, int64_t mode, int nhwc, int64_t c)
{
    enum { B = 2, C = 4, H = 6, W = 5, K = 2 }; /* C: the most channels */
    static const int64_t boxes[B * K * 5] = {1, 1, 3, 3, 21, 2, 2, 3, 3, 22, 4, 3, 9, 9, 23, 0, 0, 0, 0, 0};
    static const float params[B * 6] = {0.3f, 0, 0, 0, 0, 0, 0.5f, 1, 1, 4, 2, 5};
    Graph g;
    CtErr err;
    graph_init(&g);
    int u8 = op == CT_OP_image_normalize;
    CtType xt = u8 ? (CtType){shape_make(4, (int64_t[]){B, H, W, c}), CT_U8}
                   : (CtType){shape_make(4, (int64_t[]){B, c, H, W}), CT_F32};
    Node n = {.op = op, .nin = u8 ? 1 : 2, .iattr = {mode}, .fattr = {0.4, 0.5, 0.6, 0.7, 0.2, 0.25, 0.3, 0.35}};
    n.in[0] = graph_add_value(&g, xt, CT_ROLE_INPUT, "x");
    g.values[n.in[0]].layout = nhwc && !u8 ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
    if (!u8)
        n.in[1] = graph_add_value(&g, op == CT_OP_random_erase
                                          ? (CtType){shape_make(3, (int64_t[]){B, K, 5}), CT_I64}
                                          : (CtType){shape_make(2, (int64_t[]){B, 6}), CT_F32},
                                  CT_ROLE_INPUT, "p");
    int at = graph_add_node(&g, &n, "t", &err);
    CHECKF(at >= 0, "%s", err.msg);
    if (at < 0) {
        graph_free(&g);
        return;
    }
    ValueId y = g.nodes[at].out[0];
    g.values[y].layout = nhwc ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
    graph_mark_output(&g, y);
    int64_t nx = shape_numel(&xt.shape), ny = shape_numel(&g.values[y].type.shape);
    uint8_t img[B * H * W * C];
    float x[B * C * H * W], *xp = calloc((size_t)nx, sizeof *xp), *yp = calloc((size_t)ny, sizeof *yp);
    for (int64_t i = 0; i < nx; i++) {
        img[i % (B * H * W * C)] = (uint8_t)(i * 53 % 256);
        x[i % (B * C * H * W)] = (float)gen(i, 0, NULL);
        if (!u8)
            xp[phys(&g.values[n.in[0]], i)] = x[i];
    }
    CtTensor in[2] = {{xt, u8 ? (void *)img : x}, {g.values[n.in[1]].type, (void *)(op == CT_OP_random_erase ? (void *)boxes : (void *)params)}};
    CtTensor out;
    LibLaunch l[LIB_MAX_LAUNCHES];
    int nl;
    size_t scratch;
    CtState st;
    state_create(&st, &g);
    if (backend_run_once(&ct_backend_ref, &g, &st, in, n.nin, &out, NULL, &err)) {
        CHECKF(0, "%s: ref: %s", op_def(op)->name, err.msg);
    } else {
        if (lib_launches(&g, 132, &g.nodes[at], l, &nl, &scratch, &err) == 0 && nl == 1) {
            void *args[LIB_MAX_ARGS] = {u8 ? (void *)img : (void *)xp, u8 ? (void *)yp : in[1].data, yp};
            run_launch(&l[0], args);
            int bad = 0;
            for (int64_t i = 0; i < ny; i++)
                bad += fabsf(yp[phys(&g.values[y], i)] - ((float *)out.data)[i]) > 1e-6f;
            CHECKF(bad == 0, "%s mode %lld %s, %lld channel(s): %d values differ from ref", op_def(op)->name,
                   (long long)mode, nhwc ? "NHWC" : "NCHW", (long long)c, bad);
        } else {
            CHECKF(0, "%s: %s", op_def(op)->name, err.msg);
        }
        tensor_free(&out);
    }
    state_free(&st);
    free(xp);
    free(yp);
    graph_free(&g);
}

static void test_input_ops(void)
{
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        check_input_op(CT_OP_image_normalize, 0, nhwc, 3);
        check_input_op(CT_OP_image_normalize, 0, nhwc, 1);
        check_input_op(CT_OP_image_normalize, 0, nhwc, 4);
        for (int64_t mode = 0; mode < 3; mode++)
            check_input_op(CT_OP_random_erase, mode, nhwc, 3);
        check_input_op(CT_OP_mix_images, 0, nhwc, 3);
    }
}

/* gather and gather_grad: a bias table [13, 4] at a [5, 6] i32 index, dim 1
 * of [2, 7, 3] at an i64 one, the last dim; the index's -1 and T (out of
 * range) give zeros and take nothing. */
static void test_gather(void)
{
    static const struct {
        int ndim, kdim, dim;
        int64_t x[3], k[2];
        CtDType dt;
    } cases[] = {{2, 2, 0, {13, 4}, {5, 6}, CT_I32},
                 {3, 1, 1, {2, 7, 3}, {9}, CT_I64},
                 {2, 1, 1, {3, 10}, {12}, CT_I32}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int grad = 0; grad < 2; grad++) {
            Case c;
            int64_t y[4], ny = 0, T = cases[i].x[cases[i].dim];
            for (int d = 0; d < cases[i].ndim; d++)
                if (d != cases[i].dim)
                    y[ny++] = cases[i].x[d];
                else
                    for (int e = 0; e < cases[i].kdim; e++)
                        y[ny++] = cases[i].k[e];
            graph_init(&c.g);
            ValueId in[2] = {grad ? input(&c, "dy", (int)ny, y, 0, CT_F32)
                                  : input(&c, "x", cases[i].ndim, cases[i].x, 0, CT_F32),
                             input(&c, "index", cases[i].kdim, cases[i].k, 0, cases[i].dt)};
            if (!add_node(&c, grad ? CT_OP_gather_grad : CT_OP_gather, 2, in, (int64_t[]){cases[i].dim, T},
                          grad ? 2 : 1, NULL, 0, 0))
                check_case(&c, grad ? "gather_grad" : "gather");
        }
}

static void test_refusals(void)
{
    Case c;
    CtErr err;
    LibLaunch l[LIB_MAX_LAUNCHES];
    int nl;
    size_t scratch;
    graph_init(&c.g);
    ValueId x = input(&c, "x", 1, (int64_t[]){28}, 0, CT_F32);
    if (!add_node(&c, CT_OP_allreduce_mean, 1, &x, (int64_t[]){0}, 1, NULL, 0, 0)) {
        CHECK(!lib_supports(CT_OP_allreduce_mean));
        CHECK(lib_launches(&c.g, 132, &c.g.nodes[c.node], l, &nl, &scratch, &err) != 0 &&
              strstr(err.msg, "allreduce_mean"));
    }
    graph_free(&c.g);
    /* gather's kernels take dense memory: the layout pass gives them NCHW */
    graph_init(&c.g);
    ValueId in[2] = {input(&c, "x", 4, (int64_t[]){2, 3, 4, 5}, 1, CT_F32), input(&c, "i", 1, (int64_t[]){2}, 0, CT_I32)};
    if (!add_node(&c, CT_OP_gather, 2, in, (int64_t[]){1}, 1, NULL, 0, 1))
        CHECK(lib_launches(&c.g, 132, &c.g.nodes[c.node], l, &nl, &scratch, &err) != 0 && strstr(err.msg, "gather"));
    graph_free(&c.g);
    /* a depthwise convolution over NCHW values is cuDNN's */
    graph_init(&c.g);
    ValueId dw[2] = {input(&c, "x", 4, (int64_t[]){2, 4, 5, 5}, 0, CT_F32),
                     input(&c, "w", 4, (int64_t[]){4, 1, 3, 3}, 0, CT_F32)};
    if (!add_node(&c, CT_OP_conv2d, 2, dw, (int64_t[]){1, 1, 1, 1, 1, 1, 4}, 7, NULL, 0, 0))
        CHECK(!lib_dw_conv_fits(&c.g, &c.g.nodes[c.node]) &&
              lib_launches(&c.g, 132, &c.g.nodes[c.node], l, &nl, &scratch, &err) != 0 && strstr(err.msg, "conv2d"));
    graph_free(&c.g);
}

int main(void)
{
    /* finite inputs; then a NaN and +inf in the first input; -inf alone there (NaN in a row or channel would
     * hide what it does); a NaN in the last float input (dy of a gradient, the running variance, v) */
    static const Poison first[] = {{0, 3, NAN}, {0, 11, INFINITY}}, minus[] = {{0, 26, -INFINITY}},
                        last[] = {{1, 2, NAN}};
    static const struct {
        const Poison *p;
        int n;
    } rounds[] = {{NULL, 0}, {first, 2}, {minus, 1}, {last, 1}};
    for (size_t r = 0; r < sizeof rounds / sizeof *rounds; r++) {
        poison = rounds[r].p;
        npoison = rounds[r].n;
        test_data_movement();
        test_rows();
        test_batch_norm();
        test_group_norm();
        test_loss();
        test_epilogue();
        test_pool();
        test_dw_conv();
        test_sdpa();
        test_gather();
    }
    test_input_ops();
    test_refusals();
    return check_done("test_lib_kernels");
}
