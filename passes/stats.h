/*
 * stats: parameter count, multiply-accumulates (MACs) and activation count
 * of a model's forward graph, counted exactly as timm's benchmark.py reports
 * them in its results CSVs (param_count, infer_gmacs, infer_macts). Those
 * come from fvcore's FlopCountAnalysis and ActivationCountAnalysis on the
 * jit trace of the eval model applied to torch.ones(1, 3, H, W); fvcore
 * counts one multiply-add as one "flop" and only these ATen ops:
 *
 *   aten::_convolution  MACs N*prod(weight)*OH*OW  acts numel(out)
 *   aten::linear        MACs numel(x)*out_features  acts numel(out)
 *   aten::matmul / mm / bmm / addmm  MACs numel(a)*b[-1]  acts numel(out)
 *   aten::einsum        its contraction's MACs    acts numel(out)
 *   aten::batch_norm    eval: numel(x)*2 (affine) or *1; training: *5 or *4
 *   aten::layer_norm / group_norm  numel(x)*5 (affine) or *4
 *   aten::adaptive_avg_pool2d      numel(x)
 *   aten::upsample_* / grid_sampler  (no such op in ctimm's IR)
 *
 * and nothing for every other op: activations, softmax, elementwise adds
 * and muls, mean, max/avg pooling, reshapes, and
 * aten::scaled_dot_product_attention (fused attention), which fvcore skips
 * as unsupported. Only conv, linear and the matmul family count
 * activations.
 *
 * The mapping onto ctimm's IR, with the two places where the IR does not
 * say which ATen op timm called:
 *   conv2d, linear, matmul, batch_norm, layer_norm as above;
 *   sdpa: q@k^T and attn@v as two matmuls when count_attention is set (timm
 *     without F.scaled_dot_product_attention: fused_attn off, or torch < 2),
 *     else nothing (fused). Which CSVs used which: tests/test_stats.c;
 *   adaptive_avg_pool2d: counted when it is timm's SelectAdaptivePool2d
 *     (nn.AdaptiveAvgPool2d), not when it is the squeeze of a
 *     SqueezeExcite module (scope ending in "se", "attn" or "attn_last"),
 *     which timm writes as x.mean((2, 3), keepdim=True), an op fvcore does
 *     not count.
 *
 * Count the graph as built: passes that fold or rewrite ops (bn_fold) change
 * the counts. Every rule is linear in the batch, so per-image numbers are the
 * totals divided by the input's batch size. Each op's rule is its OpDef's
 * cost (ir/ops/<family>.c).
 */
#ifndef CTIMM_STATS_H
#define CTIMM_STATS_H

#include <stdint.h>

#include "ir/ir.h"

typedef struct StatsOptions {
    /* 1: sdpa counts as the unfused q@k^T and attn@v matmuls; 0: fused,
     * uncounted. */
    int count_attention;
} StatsOptions;

typedef struct GraphStats {
    int64_t params;      /* elements over all parameters */
    int64_t macs;        /* fvcore's "flops": multiply-accumulates */
    int64_t activations; /* elements written by conv, linear, matmul (and sdpa's matmuls) */
    int64_t macs_by_op[CT_NOPS], activations_by_op[CT_NOPS];
} GraphStats;

/* The counts of forward graph g (eval, or training mode with its BN state
 * assigns) as timm's benchmark.py reports them. Fails for a graph holding
 * backward or update ops (ops without a cost rule), whose counts timm does
 * not define. */
int graph_stats(const Graph *g, const StatsOptions *opt, GraphStats *st, CtErr *err);

#endif
