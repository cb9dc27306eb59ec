/* The loop body both renderers print: one statement per instruction, in
 * the compute type, with the helpers their preludes define (ct_h2f,
 * ct_f2h, ct_bf2f, ct_f2bf, CT_INF, and in f32 ct_expf, ct_tanhf, ct_erff:
 * the host's vectorisable ones, CUDA's own). Text that is valid C and CUDA C.
 * And a graph's translation unit, in either language. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/render.h"

int render_graph(const Graph *g, const FusePlan *p, int cuda, CtBuf *out, int *nkernels, CtErr *err)
{
    (cuda ? render_cuda_prelude : render_c_prelude)(out);
    *nkernels = 0;
    for (int launch = 0; launch < p->kernels_after; launch++) {
        if (!kir_lowerable(p, launch))
            continue;
        KirKernel k;
        KirOptions opt = {KIR_F32, 1};
        if (kir_lower(g, p, launch, opt, &k, err))
            return -1;
        (cuda ? render_cuda_kernel : render_c_kernel)(&k, out);
        kir_free(&k);
        ++*nkernels;
    }
    return 0;
}

const char *render_storage_type(CtDType t)
{
    switch (t) {
    case CT_F32: return "float";
    case CT_F64: return "double";
    case CT_F16: case CT_BF16: return "unsigned short";
    case CT_I32: return "int";
    case CT_I64: return "long long";
    case CT_U8: return "unsigned char";
    default: CT_ASSERT(!"no storage type"); return "";
    }
}

static void constant(double v, const char *type, CtBuf *out)
{
    if (isnan(v))
        buf_printf(out, "((%s)(CT_INF - CT_INF))", type);
    else if (isinf(v))
        buf_printf(out, "((%s)(%sCT_INF))", type, v < 0 ? "-" : "");
    else
        buf_printf(out, "((%s)%.17g)", type, v);
}

/* Element `off` of buffer b as the compute type. */
static void load(const KirBuf *b, int buf, const char *off, const char *type, CtBuf *out)
{
    const char *conv = b->dtype == CT_F16 ? "ct_h2f" : b->dtype == CT_BF16 ? "ct_bf2f" : "";
    buf_printf(out, "(%s)%s(b%d[%s])", type, conv, buf, off);
}

static void store(const KirBuf *b, int buf, int a, const char *x, CtBuf *out)
{
    if (b->dtype == CT_F16 || b->dtype == CT_BF16)
        buf_printf(out, "b%d[i%s] = %s((float)v%d%s);", buf, x, b->dtype == CT_F16 ? "ct_f2h" : "ct_f2bf", a, x);
    else
        buf_printf(out, "b%d[i%s] = (%s)v%d%s;", buf, x, render_storage_type(b->dtype), a, x);
}

static void round_to(CtDType t, int a, const char *x, int f32, CtBuf *out)
{
    const char *type = f32 ? "float" : "double";
    switch (t) {
    case CT_F16: buf_printf(out, "(%s)ct_h2f(ct_f2h((float)v%d%s))", type, a, x); break;
    case CT_BF16: buf_printf(out, "(%s)ct_bf2f(ct_f2bf((float)v%d%s))", type, a, x); break;
    case CT_F32: case CT_F64: buf_printf(out, "(%s)(%s)v%d%s", type, render_storage_type(t), a, x); break;
    default: buf_printf(out, "%s(v%d%s)", f32 ? "nearbyintf" : "nearbyint", a, x); break;
    }
}

/* Whether view v's offset is i itself, or 0 everywhere. */
static int view_identity(const KirView *v) { return v->ndim == 0; }
static int view_zero(const KirView *v) { return v->ndim == 1 && v->stride[0] == 0; }

void render_view_offset(const KirView *v, int j, const char *name, const char *x, const char *at, const char *indent,
                        CtBuf *out)
{
    if (view_identity(v)) {
        buf_printf(out, "%sconst long long %s%d%s = %s;\n", indent, name, j, x, at);
        return;
    }
    if (view_zero(v)) {
        buf_printf(out, "%sconst long long %s%d%s = 0;\n", indent, name, j, x);
        return;
    }
    /* the divisions by constants in 32 bits where the index fits: a few
     * instructions each, where a 64-bit one takes several times as many */
    int64_t numel = 1;
    for (int d = 0; d < v->ndim; d++)
        numel *= v->size[d];
    const char *type = numel <= (int64_t)UINT32_MAX ? "unsigned" : "long long", *sfx = *type == 'u' ? "U" : "LL";
    buf_printf(out, "%slong long %s%d%s = 0;\n%s{\n%s    %s r = (%s)(%s);\n", indent, name, j, x, indent, indent, type,
               type, at);
    /* each division waits for the next dim that reads its quotient, so a
     * broadcast dim (stride 0) costs none of its own */
    int64_t div = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->stride[d] == 0) {
            div *= v->size[d];
            continue;
        }
        if (div > 1)
            buf_printf(out, "%s    r /= %lld%s;\n", indent, (long long)div, sfx);
        if (d == 0) {
            buf_printf(out, "%s    %s%d%s += (long long)r * %lldLL;\n", indent, name, j, x, (long long)v->stride[0]);
            break;
        }
        buf_printf(out, "%s    %s%d%s += (long long)(r %% %lld%s) * %lldLL;\n", indent, name, j, x,
                   (long long)v->size[d], sfx, (long long)v->stride[d]);
        div = v->size[d];
    }
    buf_printf(out, "%s}\n", indent);
}

/* The offsets of the loop's views: o<j><x> for view j at element i<x>. */
static void offsets(const KirLoop *l, const char *x, const char *indent, CtBuf *out)
{
    char at[24];
    snprintf(at, sizeof at, "i%s", x);
    for (int j = 0; j < l->nviews; j++)
        render_view_offset(&l->views[j], j, "o", x, at, indent, out);
}

int64_t render_run(const KirLoop *l)
{
    int64_t run = 0;
    for (int j = 0; j < l->nviews; j++) {
        const KirView *v = &l->views[j];
        if (!view_identity(v) && !view_zero(v) && v->ndim > 1 && (run == 0 || v->size[v->ndim - 1] < run))
            run = v->size[v->ndim - 1];
    }
    for (int j = 0; j < l->nviews && run; j++) {
        const KirView *v = &l->views[j];
        if (!view_identity(v) && !view_zero(v) && v->ndim > 1 && v->size[v->ndim - 1] % run)
            run = 0;
    }
    return run >= RENDER_MIN_RUN && l->numel % run == 0 ? run : 0;
}

void render_run_bases(const KirLoop *l, const char *indent, CtBuf *out)
{
    for (int j = 0; j < l->nviews; j++)
        render_view_offset(&l->views[j], j, "p", "", "i0", indent, out);
}

/* The offsets of the loop's views at element t of a run from i0 (the
 * bases p<j> set): each view's innermost dim runs on through it. */
static void run_offsets(const KirLoop *l, const char *indent, CtBuf *out)
{
    for (int j = 0; j < l->nviews; j++) {
        const KirView *v = &l->views[j];
        int64_t step = view_identity(v) ? 1 : view_zero(v) ? 0 : v->stride[v->ndim - 1];
        buf_printf(out, "%sconst long long o%d = p%d + t * %lldLL;\n", indent, j, j, (long long)step);
    }
}

void render_body_part(const KirKernel *k, const KirLoop *l, const char *indent, const char *x, int part, CtBuf *out)
{
    static const char *const binop[] = {[KIR_ADD] = "+", [KIR_SUB] = "-", [KIR_MUL] = "*", [KIR_DIV] = "/",
                                        [KIR_LT] = "<", [KIR_LE] = "<="};
    static const char *const fn[] = {[KIR_EXP] = "exp", [KIR_ERF] = "erf", [KIR_TANH] = "tanh"};
    int f32 = l->compute == CT_F32;
    const char *type = f32 ? "float" : "double", *sfx = f32 ? "f" : "";
    if (part & RENDER_OFFSETS)
        offsets(l, x, indent, out);
    for (int j = 0; j < l->nins; j++) {
        const KirInstr *in = &l->ins[j];
        char off[32];
        if (!(part & (in->op == KIR_STORE ? RENDER_STORES : in->op == KIR_LOAD ? RENDER_LOADS : RENDER_VALUES)))
            continue;
        buf_printf(out, "%s", indent);
        if (in->op == KIR_STORE) {
            store(&k->bufs[in->buf], in->buf, in->a, x, out);
            buf_printf(out, "\n");
            continue;
        }
        buf_printf(out, "const %s v%d%s = ", type, j, x);
        switch (in->op) {
        case KIR_LOAD:
            snprintf(off, sizeof off, "o%d%s", in->view, x);
            load(&k->bufs[in->buf], in->buf, off, type, out);
            break;
        case KIR_CONST: constant(in->imm, type, out); break;
        case KIR_ADD: case KIR_SUB: case KIR_MUL: case KIR_DIV:
            buf_printf(out, "v%d%s %s v%d%s", in->a, x, binop[in->op], in->b, x);
            break;
        case KIR_LT: case KIR_LE:
            buf_printf(out, "(%s)(v%d%s %s v%d%s)", type, in->a, x, binop[in->op], in->b, x);
            break;
        case KIR_POW: buf_printf(out, "pow%s(v%d%s, v%d%s)", sfx, in->a, x, in->b, x); break;
        case KIR_NEG: buf_printf(out, "-v%d%s", in->a, x); break;
        case KIR_EXP: case KIR_ERF: case KIR_TANH:
            buf_printf(out, "%s%s%s(v%d%s)", f32 ? "ct_" : "", fn[in->op], sfx, in->a, x);
            break;
        case KIR_SQRT: buf_printf(out, "sqrt%s(v%d%s)", sfx, in->a, x); break;
        case KIR_SELECT: buf_printf(out, "v%d%s != 0 ? v%d%s : v%d%s", in->a, x, in->b, x, in->c, x); break;
        case KIR_ROUND: round_to(in->dtype, in->a, x, f32, out); break;
        default: CT_ASSERT(!"unknown kernel IR op"); break;
        }
        buf_printf(out, ";\n");
    }
}

void render_body(const KirKernel *k, const KirLoop *l, const char *indent, int run, CtBuf *out)
{
    if (run)
        run_offsets(l, indent, out);
    render_body_part(k, l, indent, "", run ? RENDER_ALL & ~RENDER_OFFSETS : RENDER_ALL, out);
}
