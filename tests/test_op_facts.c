/* Every op states every fact a pass or backend reads from its OpDef
 * (ir/ops.h), and the facts agree: a fusion class, an amp policy and a
 * layout rule; one ref kernel (ref, or ref_ranks for an op that reduces
 * over the ranks); a scalar expression exactly for the ops fusion puts into
 * kernels, well formed for each attribute value tried, and the ref kernel
 * of the elementwise ones; the ops ir/formulas.h lists as activations are
 * unary elementwise ops with a VJP, and every epilogue activation is one
 * (the cpu and cuda node kernels compute it from there); a cost rule for
 * every forward op; multi-tensor batching only for elementwise updates;
 * the keep masks within the inputs. That each such expression lowers and
 * equals the ref kernel is tests/test_codegen.c's check, as the VJPs'
 * is tests/test_grad.c's. */
#include <string.h>

#include "check.h"
#include "ir/formulas.h"
#include "ir/scalar.h"

static int in_activations(int op)
{
#define IS(name) || op == CT_OP_##name
    return 0 CT_ACTIVATIONS(IS);
#undef IS
}

static int fused(OpFusion f) { return f == OP_ELEMENTWISE || f == OP_ACTIVATION || f == OP_VIEW; }

/* The expression of op with nin inputs and these attributes: instructions
 * reading only earlier ones, inputs below nin, output 0 defined. */
static void check_expression(CtOp op, int nin, int64_t a0, int64_t a1)
{
    const char *name = op_def(op)->name;
    Node n = {.op = op, .nin = nin, .iattr = {a0, a1}, .fattr = {0.9, 0.999, 1e-8, 0.01}};
    Sx s;
    sx_build(&n, &s);
    CHECKF(s.n > 0 && s.out[0] >= 0 && s.out[0] < s.n, "%s: no output", name);
    for (int j = 0; j < s.n; j++) {
        const SxIns *in = &s.ins[j];
        int arity = sx_arity(in->op), ok = in->op >= SX_IN && in->op < SX_NOPS;
        if (in->op == SX_IN)
            ok = ok && in->a >= 0 && in->a < nin;
        ok = ok && (arity < 1 || in->a < j) && (arity < 2 || in->b < j) && (arity < 3 || in->c < j);
        CHECKF(ok, "%s (%d inputs, attributes %lld %lld): instruction %d is malformed", name, nin, (long long)a0,
               (long long)a1, j);
    }
}

static void check_op(CtOp op)
{
    const OpDef *d = op_def(op);
    const char *name = d->name;
    unsigned inputs = d->max_in >= 32 ? ~0u : (1u << d->max_in) - 1;
    CHECKF(d->fusion != OP_FUSION_UNSET, "%s: no fusion class", name);
    CHECKF(d->amp != OP_AMP_UNSET, "%s: no amp policy", name);
    CHECKF(d->layout != OP_LAYOUT_UNSET, "%s: no layout rule", name);
    CHECKF(!d->ref != !d->ref_ranks, "%s: not one ref kernel (ref or ref_ranks)", name);
    CHECKF(fused(d->fusion) == (d->scalar != NULL), "%s: fusion class and scalar expression disagree", name);
    CHECKF((d->fusion == OP_ELEMENTWISE || d->fusion == OP_ACTIVATION) == (d->ref == sx_ref),
           "%s: an elementwise op's ref kernel is its scalar expression's, and only theirs", name);
    CHECKF(!d->vjp || d->cost, "%s: a forward op without a cost rule", name);
    CHECKF(!d->batch_from || (d->fusion == OP_ELEMENTWISE && d->batch_from < d->min_in),
           "%s: batches as an update but is no elementwise one", name);
    CHECKF(!(d->amp_keep & ~inputs) && !(d->layout_keep & ~inputs), "%s: keeps an input it does not have", name);
    CHECKF(d->amp != OP_AMP_DEST || (d->amp_keep & 1), "%s: casts to input 0's dtype but casts input 0", name);
    if (in_activations(op))
        CHECKF((d->fusion == OP_ELEMENTWISE || d->fusion == OP_ACTIVATION) && d->min_in == 1 && d->max_in == 1 &&
                   d->vjp,
               "%s: listed as an activation (ir/formulas.h) but no unary elementwise op with a VJP", name);
    if (d->fusion == OP_ACTIVATION)
        CHECKF(in_activations(op), "%s: an epilogue activation without its formulas in ir/formulas.h", name);
    if (!d->scalar)
        return;
    for (int nin = d->min_in; nin <= d->max_in; nin++) {
        if (op == CT_OP_act_grad) {
            for (int act = 0; act < CT_NOPS; act++)
                if (in_activations(act))
                    for (int approx = 0; approx < 2; approx++)
                        check_expression(op, nin, act, approx);
            continue;
        }
        for (int64_t a = 0; a < 4; a++)
            check_expression(op, nin, a, a & 1);
    }
}

int main(void)
{
    for (int op = 0; op < CT_NOPS; op++)
        check_op((CtOp)op);
    return check_done("test_op_facts");
}
