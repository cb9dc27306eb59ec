/*
 * Optimizer updates of one parameter; lr is a runtime scalar input so a
 * schedule never recompiles the graph, and the results are written back
 * with assign nodes.
 * sgd_update(p, g, buf, lr), fattr momentum, weight_decay; iattr nesterov ->
 *   p', buf': torch.optim.SGD with dampening 0. A zero momentum buffer gives
 *   exactly torch's first step (buf = d), so no step count is needed.
 * adamw_update(p, g, m, v, lr, step i64 []), fattr beta1, beta2, eps,
 *   weight_decay -> p', m', v': torch.optim.AdamW (amsgrad off); `step` is
 *   the number of updates before this one.
 * Both take an optional last input `apply` (a scalar, 1 or 0): at 0 the
 * outputs are the state unchanged, which is how a step whose gradients are
 * not finite is skipped (GradScaler's rule) without leaving the graph.
 * all_finite(x) -> scalar 1 when every element of x is finite, else 0.
 */
#include <math.h>

#include "ops_impl.h"

static int infer_update(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    int nstate = n->op == CT_OP_sgd_update ? 1 : 2;
    if (n->nin == 4 + 2 * (nstate - 1) + 1 && (in_shape(g, n, n->nin - 1)->ndim != 0))
        return ct_fail(err, "the apply flag must be a scalar");
    if (require_float(g, n, 0, -1, err))
        return -1;
    for (int k = 1; k <= 1 + nstate; k++)
        if (require_shape(g, n, k, in_shape(g, n, 0), err))
            return -1;
    if (require_shape(g, n, 2 + nstate, &(CtShape){0}, err))
        return -1;
    if (n->op == CT_OP_adamw_update && (in_type(g, n, 5)->dtype != CT_I64 || in_shape(g, n, 5)->ndim != 0))
        return ct_fail(err, "step must be an i64 scalar");
    for (int k = 0; k <= nstate; k++)
        out[k] = *in_type(g, n, 0);
    return 1 + nstate;
}

static void sgd_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[3][0], m = n->fattr[0], wd = n->fattr[1];
    if (n->nin == 5 && in[4][0] == 0) {
        for (int64_t i = 0; i < count; i++) {
            out[0][i] = in[0][i];
            out[1][i] = in[2][i];
        }
        return;
    }
    for (int64_t i = 0; i < count; i++) {
        double d = in[1][i] + wd * in[0][i];
        double buf = m * in[2][i] + d;
        if (m != 0)
            d = n->iattr[0] ? d + m * buf : buf;
        out[0][i] = in[0][i] - lr * d;
        out[1][i] = buf;
    }
}

const OpDef op_sgd_update = {.name = "sgd_update", .min_in = 4, .max_in = 5, .iattr = {"nesterov"},
                             .fattr = {"momentum", "weight_decay"}, .infer = infer_update, .ref = sgd_update_ref};

static void adamw_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[4][0], t = in[5][0] + 1, b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2];
    double wd = n->fattr[3], bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    if (n->nin == 7 && in[6][0] == 0) {
        for (int64_t i = 0; i < count; i++) {
            out[0][i] = in[0][i];
            out[1][i] = in[2][i];
            out[2][i] = in[3][i];
        }
        return;
    }
    for (int64_t i = 0; i < count; i++) {
        double p = in[0][i] * (1 - lr * wd), g1 = in[1][i];
        double m = b1 * in[2][i] + (1 - b1) * g1, v = b2 * in[3][i] + (1 - b2) * g1 * g1;
        out[0][i] = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
        out[1][i] = m;
        out[2][i] = v;
    }
}

const OpDef op_adamw_update = {.name = "adamw_update", .min_in = 6, .max_in = 7,
                               .fattr = {"beta1", "beta2", "eps", "weight_decay"}, .infer = infer_update,
                               .ref = adamw_update_ref};

static int infer_all_finite(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    out[0] = (CtType){{0}, CT_F32};
    return 1;
}

static void all_finite_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    out[0][0] = 1;
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(in[0][i]))
            out[0][0] = 0;
}

const OpDef op_all_finite = {.name = "all_finite", .min_in = 1, .max_in = 1, .infer = infer_all_finite,
                             .ref = all_finite_ref};
