#include "ops_impl.h"

OpCost op_cost_none(const Graph *g, const Node *n, unsigned flags) { return (OpCost){0, 0}; }

int infer_like_input0(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    out[0] = *in_type(g, n, 0);
    return 1;
}

int require_float(const Graph *g, const Node *n, int i, int ndim, CtErr *err)
{
    const CtType *t = in_type(g, n, i);
    char b[96];
    if (!ct_dtype_is_float(t->dtype))
        return ct_fail(err, "input %d must be a float tensor, got %s", i, ct_dtype_name(t->dtype));
    if (ndim >= 0 && t->shape.ndim != ndim)
        return ct_fail(err, "input %d must have %d dims, got %s", i, ndim, shape_str(&t->shape, b, sizeof b));
    return 0;
}

int require_shape(const Graph *g, const Node *n, int i, const CtShape *s, CtErr *err)
{
    char a[96], b[96];
    if (!shape_equal(in_shape(g, n, i), s))
        return ct_fail(err, "input %d has shape %s, expected %s", i,
                       shape_str(in_shape(g, n, i), a, sizeof a), shape_str(s, b, sizeof b));
    return 0;
}

void strided_gather(const double *src, double *dst, const CtShape *out, const int64_t *stride)
{
    int64_t idx[CT_MAX_DIMS] = {0}, count = shape_numel(out);
    for (int64_t o = 0; o < count; o++) {
        int64_t at = 0;
        for (int d = 0; d < out->ndim; d++)
            at += idx[d] * stride[d];
        dst[o] = src[at];
        for (int d = out->ndim - 1; d >= 0 && ++idx[d] == out->d[d]; d--)
            idx[d] = 0;
    }
}
