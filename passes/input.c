/* Contract: input_image(g, s) returns g with its image input turned into
 * the loader's uint8 NHWC batch and the input nodes of s in front of
 * everything that read it (passes/passes.h). */
#include "ir/rewrite.h"
#include "passes/passes.h"

/* The forward graph's first input: the image batch model_build made. */
static ValueId image_input(const Graph *g)
{
    for (ValueId v = 0; v < g->nvalues; v++)
        if (g->values[v].role == CT_ROLE_INPUT)
            return v;
    return -1;
}

int input_image(const Graph *g, const InputSpec *s, Graph *out, CtErr *err)
{
    ValueId x0 = image_input(g);
    const CtType *t = x0 >= 0 ? &g->values[x0].type : NULL;
    if (!t || t->dtype != CT_F32 || t->shape.ndim != 4)
        return ct_fail(err, "input: the graph's first input is not an f32 image batch [B, C, H, W]");
    const int64_t *d = t->shape.d;
    if (d[1] > 4)
        return ct_fail(err, "input: %lld-channel images; the uint8 batch holds 1 ('L'), 3 (RGB) or 4 (RGBA)",
                       (long long)d[1]);
    Rewriter r;
    rewrite_begin(&r, g, out);
    ValueId x = rewrite_value(&r, x0);
    out->values[x].type = (CtType){shape_make(4, (int64_t[]){d[0], d[2], d[3], d[1]}), CT_U8};
    r.e.scope = "input";
    double norm[8]; /* mean and std of the batch's d[1] channels; 0 and 1 past them, so no stale value keys a kernel */
    for (int k = 0; k < 8; k++)
        norm[k] = k % 4 < d[1] ? (k < 4 ? s->mean[k] : s->std[k - 4]) : k / 4;
    ValueId y = emit(&r.e, CT_OP_image_normalize, 1, &x, NULL, 0, norm, 8, 0);
    if (s->erase_boxes > 0) {
        ValueId boxes = graph_add_value(out, (CtType){shape_make(3, (int64_t[]){d[0], s->erase_boxes, 5}), CT_I64},
                                        CT_ROLE_INPUT, "erase_boxes");
        int64_t mode = s->erase_mode;
        y = emit(&r.e, CT_OP_random_erase, 2, (ValueId[]){y, boxes}, &mode, 1, NULL, 0, 0);
    }
    if (s->mix) {
        ValueId params = graph_add_value(out, (CtType){shape_make(2, (int64_t[]){d[0], 6}), CT_F32}, CT_ROLE_INPUT,
                                         "mix_params");
        y = emit(&r.e, CT_OP_mix_images, 2, (ValueId[]){y, params}, NULL, 0, NULL, 0, 0);
    }
    rewrite_map(&r, x0, y);
    for (int i = 0; i < g->nnodes && !r.e.failed; i++)
        rewrite_copy(&r, i);
    return rewrite_end(&r, err);
}
