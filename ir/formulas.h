/*
 * The formulas that more than one backend compiles: each activation's value
 * and gradient, and the SGD and Adam update rules, written once. The other
 * elementwise ops build their scalar expressions in their own files
 * (ir/ops/): backends compute them through the kernel IR alone, but for the
 * cpu's one-operator loops of add, mul, div and scale_shift.
 *
 * The list below is a plain header. The formulas are C over a small algebra
 * the includer defines first, so that one text gives
 *   scalar expressions (ir/ops/sx_algebra.h: the OpDefs' scalar rules, which
 *     the ref backend evaluates in double and codegen/kir.c lowers into the
 *     fused kernels of the cpu and cuda backends),
 *   f32 and f64 numbers (the cpu backend's node kernels, runtime/cpu/), and
 *   CUDA C numbers (the library kernels' ct_act, codegen/cuda/lib_source.c,
 *     which gives NVRTC this text).
 * The includer defines FX_T, the type of a value, and either
 *   the primitive operations FX_K(c) (the constant c, a double), FX_ADD,
 *     FX_SUB, FX_MUL, FX_DIV, FX_POW, FX_NEG, FX_EXP, FX_SQRT, FX_ERF,
 *     FX_TANH, FX_LT, FX_LE (1 or 0), FX_SEL(c, a, b) (c != 0 ? a : b) and
 *     FX_CTX / FX_ARG, a first parameter every formula takes and passes on;
 * or only the math functions FX_EXP, FX_SQRT, FX_ERF, FX_TANH, FX_POW, for
 * numbers, whose other operations are C's. FX_FN qualifies each function
 * (default static inline). Attributes (gelu's form, the momentum) are C
 * values, not the algebra's: an expression holds only the branch they take.
 *
 * Numbers follow torch's kernels, NaN and infinities included: where an
 * activation is flat its gradient selects 0 rather than multiplying dy by 0
 * (threshold_backward, hardsigmoid_backward, hardswish_backward), so an
 * infinite or NaN dy there gives 0; relu selects on x <= 0, which NaN fails,
 * so relu(NaN) = NaN and its gradient passes dy.
 */
#ifndef CTIMM_FORMULAS_LIST_H
#define CTIMM_FORMULAS_LIST_H

/* The activations, y = f(x): ops with a formula fx_<name>(x, approx) and a
 * gradient fx_<name>_grad(x, dy, approx) below (approx: gelu's tanh form),
 * which act_grad computes. */
#define CT_ACTIVATIONS(X) X(relu) X(gelu) X(silu) X(sigmoid) X(hard_swish) X(hard_sigmoid) X(rsqrt) X(sqrt) X(exp)

#endif

#ifdef FX_T

#ifndef FX_FN
#define FX_FN static inline
#endif
#ifndef FX_ADD /* numbers */
#define FX_CTX
#define FX_ARG
#define FX_K(c) ((FX_T)(c))
#define FX_ADD(a, b) ((a) + (b))
#define FX_SUB(a, b) ((a) - (b))
#define FX_MUL(a, b) ((a) * (b))
#define FX_DIV(a, b) ((a) / (b))
#define FX_NEG(a) (-(a))
#define FX_LT(a, b) ((a) < (b))
#define FX_LE(a, b) ((a) <= (b))
#define FX_SEL(c, a, b) ((c) ? (a) : (b))
#endif

#define K FX_K
#define ADD FX_ADD
#define SUB FX_SUB
#define MUL FX_MUL
#define DIV FX_DIV
#define POW FX_POW
#define NEG FX_NEG
#define EXP FX_EXP
#define SQRT FX_SQRT
#define ERF FX_ERF
#define TANH FX_TANH
#define LT FX_LT
#define LE FX_LE
#define SEL FX_SEL

FX_FN FX_T fx_sigmoid_of(FX_CTX FX_T x) { return DIV(K(1), ADD(EXP(NEG(x)), K(1))); }

FX_FN FX_T fx_hard_sigmoid_of(FX_CTX FX_T x)
{
    return SEL(LE(x, K(-3)), K(0), SEL(LE(K(3), x), K(1), ADD(DIV(x, K(6)), K(0.5))));
}

FX_FN FX_T fx_relu(FX_CTX FX_T x, int approx) { return SEL(LE(x, K(0)), K(0), x); }
FX_FN FX_T fx_relu_grad(FX_CTX FX_T x, FX_T dy, int approx) { return SEL(LE(x, K(0)), K(0), dy); }

/* gelu: the exact erf form (nn.GELU()), or with approx the tanh form;
 * torch's constants (x / sqrt 2 as x * M_SQRT1_2). */
FX_FN FX_T fx_gelu(FX_CTX FX_T x, int approx)
{
    FX_T inner;
    if (approx)
        inner = TANH(MUL(K(0.79788456080286535588), ADD(x, MUL(K(0.044715), MUL(MUL(x, x), x)))));
    else
        inner = ERF(MUL(x, K(0.70710678118654752440)));
    return MUL(MUL(K(0.5), x), ADD(inner, K(1)));
}

FX_FN FX_T fx_gelu_grad(FX_CTX FX_T x, FX_T dy, int approx)
{
    FX_T d;
    if (approx) {
        FX_T x2 = MUL(x, x);
        FX_T t = TANH(MUL(K(0.79788456080286535588), ADD(x, MUL(K(0.044715), MUL(x2, x)))));
        FX_T left = MUL(K(0.5), ADD(K(1), t));
        FX_T right = MUL(MUL(MUL(K(0.5), x), SUB(K(1), MUL(t, t))),
                         MUL(K(0.79788456080286535588), ADD(MUL(K(3 * 0.044715), x2), K(1))));
        d = ADD(left, right);
    } else {
        FX_T cdf = MUL(K(0.5), ADD(ERF(MUL(x, K(0.70710678118654752440))), K(1)));
        FX_T pdf = MUL(EXP(MUL(K(-0.5), MUL(x, x))), K(0.39894228040143267794)); /* 1 / sqrt(2 pi) */
        d = ADD(cdf, MUL(x, pdf));
    }
    return MUL(dy, d);
}

FX_FN FX_T fx_silu(FX_CTX FX_T x, int approx) { return MUL(x, fx_sigmoid_of(FX_ARG x)); }

FX_FN FX_T fx_silu_grad(FX_CTX FX_T x, FX_T dy, int approx)
{
    FX_T s = fx_sigmoid_of(FX_ARG x);
    return MUL(dy, MUL(s, ADD(K(1), MUL(x, SUB(K(1), s)))));
}

FX_FN FX_T fx_sigmoid(FX_CTX FX_T x, int approx) { return fx_sigmoid_of(FX_ARG x); }

FX_FN FX_T fx_sigmoid_grad(FX_CTX FX_T x, FX_T dy, int approx)
{
    FX_T s = fx_sigmoid_of(FX_ARG x);
    return MUL(dy, MUL(s, SUB(K(1), s)));
}

FX_FN FX_T fx_hard_swish(FX_CTX FX_T x, int approx) { return MUL(x, fx_hard_sigmoid_of(FX_ARG x)); }

/* PyTorch's hardswish_backward: 0 below -3, x/3 + 1/2 up to 3 inclusive,
 * then 1, and 1 at NaN (its CUDA kernel's and scalar CPU kernel's branches). */
FX_FN FX_T fx_hard_swish_grad(FX_CTX FX_T x, FX_T dy, int approx)
{
    return SEL(LT(x, K(-3)), K(0), SEL(LE(x, K(3)), MUL(dy, ADD(DIV(x, K(3)), K(0.5))), dy));
}

FX_FN FX_T fx_hard_sigmoid(FX_CTX FX_T x, int approx) { return fx_hard_sigmoid_of(FX_ARG x); }

FX_FN FX_T fx_hard_sigmoid_grad(FX_CTX FX_T x, FX_T dy, int approx)
{
    return SEL(LT(K(-3), x), SEL(LT(x, K(3)), MUL(K(1.0 / 6), dy), K(0)), K(0));
}

FX_FN FX_T fx_rsqrt(FX_CTX FX_T x, int approx) { return DIV(K(1), SQRT(x)); }
FX_FN FX_T fx_rsqrt_grad(FX_CTX FX_T x, FX_T dy, int approx) { return MUL(dy, DIV(K(-0.5), MUL(x, SQRT(x)))); }

/* torch's sqrt_backward: dy / (2 sqrt(x)), infinite at 0 as torch's (a norm's
 * gradient at 0 is the caller's to avoid) */
FX_FN FX_T fx_sqrt(FX_CTX FX_T x, int approx) { return SQRT(x); }
FX_FN FX_T fx_sqrt_grad(FX_CTX FX_T x, FX_T dy, int approx) { return DIV(dy, MUL(K(2), SQRT(x))); }

/* torch's exp_backward: dy * exp(x) */
FX_FN FX_T fx_exp(FX_CTX FX_T x, int approx) { return EXP(x); }
FX_FN FX_T fx_exp_grad(FX_CTX FX_T x, FX_T dy, int approx) { return MUL(dy, EXP(x)); }

/* Activation `act` (its op kind) at x, and its gradient: one dispatch for
 * callers that hold the kind as a value (the CUDA kernel's argument). */
FX_FN FX_T fx_act(FX_CTX int act, int approx, FX_T x)
{
#define FX_CASE(name) \
    if (act == CT_OP_##name) \
        return fx_##name(FX_ARG x, approx);
    CT_ACTIVATIONS(FX_CASE)
#undef FX_CASE
    return x;
}

FX_FN FX_T fx_act_grad(FX_CTX int act, int approx, FX_T x, FX_T dy)
{
#define FX_CASE(name) \
    if (act == CT_OP_##name) \
        return fx_##name##_grad(FX_ARG x, dy, approx);
    CT_ACTIVATIONS(FX_CASE)
#undef FX_CASE
    return dy;
}

/* torch SGD with dampening 0 (ir/ops/optim.c): p' and the momentum buffer
 * buf'. A zero buffer gives torch's first step (buf' = d). */
FX_FN void fx_sgd(FX_CTX FX_T p, FX_T g, FX_T buf, FX_T lr, double momentum, double wd, int nesterov, FX_T *p1,
                  FX_T *buf1)
{
    FX_T d = ADD(g, MUL(K(wd), p));
    *buf1 = ADD(MUL(K(momentum), buf), d);
    if (momentum != 0)
        d = nesterov ? ADD(d, MUL(K(momentum), *buf1)) : *buf1;
    *p1 = SUB(p, MUL(lr, d));
}

/* fx_sgd's direction with momentum, before lr, from its buf' (timm SGDW's
 * `grad` after the momentum; decoupled, so no decay in g). */
FX_FN FX_T fx_sgd_dir(FX_CTX FX_T g, FX_T buf1, double momentum, int nesterov)
{
    return nesterov ? ADD(g, MUL(K(momentum), buf1)) : buf1;
}

/* Adam's bias correction 1 - beta^t at step t (1-based). */
FX_FN FX_T fx_bias_correction(FX_CTX double beta, FX_T t) { return SUB(K(1), POW(K(beta), t)); }

/* RAdam's rectification at step t: the factor on the adaptive step, or 0
 * while the variance is not yet tractable (rho_t <= 5: an SGD step with
 * momentum). */
FX_FN FX_T fx_radam_rect(FX_CTX double b2, FX_T t)
{
    double rho_inf = 2 / (1 - b2) - 1;
    FX_T bt = POW(K(b2), t);
    FX_T rho = SUB(K(rho_inf), DIV(MUL(MUL(K(2), t), bt), SUB(K(1), bt)));
    FX_T r = SQRT(DIV(MUL(MUL(SUB(rho, K(4)), SUB(rho, K(2))), K(rho_inf)), MUL(K((rho_inf - 4) * (rho_inf - 2)), rho)));
    return SEL(LE(rho, K(5)), K(0), r);
}

/* timm's cautious direction: u * mask / mean, mask 1 where u g > 0, else 0
 * (ir/ops/optim.c), NaN staying NaN as torch's product. */
FX_FN FX_T fx_cautious(FX_CTX FX_T u, FX_T g, FX_T mean) { return MUL(u, DIV(LT(K(0), MUL(u, g)), mean)); }

/* One element of an Adam step (ir/ops/optim.c's rules: 0 torch AdamW, 1
 * Adam, 2 RAdam, 3 timm AdaBelief) given the bias corrections bc1, bc2 and
 * RAdam's rect: p', m', v'. dlr: the lr of the decoupled decay; with
 * caution, m' moves p as fx_cautious against g with the mask's mean cmean. */
FX_FN void fx_adam(FX_CTX FX_T p, FX_T g, FX_T m, FX_T v, FX_T lr, FX_T dlr, FX_T bc1, FX_T bc2, FX_T rect, int rule,
                   double b1, double b2, double eps, double wd, int caution, FX_T cmean, FX_T *p1, FX_T *m1, FX_T *v1)
{
    if (rule == 0 || rule == 3)
        p = MUL(p, SUB(K(1), MUL(dlr, K(wd))));
    else
        g = ADD(g, MUL(K(wd), p));
    *m1 = ADD(MUL(K(b1), m), MUL(K(1 - b1), g));
    FX_T r = rule == 3 ? SUB(g, *m1) : g;
    *v1 = ADD(MUL(K(b2), v), MUL(MUL(K(1 - b2), r), r));
    if (rule == 3)
        *v1 = ADD(*v1, K(eps));
    FX_T step = MUL(DIV(lr, bc1), caution ? fx_cautious(FX_ARG * m1, g, cmean) : *m1);
    if (rule == 2)
        *p1 = SUB(p, SEL(rect, DIV(MUL(MUL(step, rect), SQRT(bc2)), ADD(SQRT(*v1), K(eps))), step));
    else
        *p1 = SUB(p, DIV(step, ADD(DIV(SQRT(*v1), SQRT(bc2)), K(eps))));
}

#undef K
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef POW
#undef NEG
#undef EXP
#undef SQRT
#undef ERF
#undef TANH
#undef LT
#undef LE
#undef SEL

#endif
