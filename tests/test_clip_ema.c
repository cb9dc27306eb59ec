/* Gradient clipping and model EMA in the training step, on test_resnet at
 * 32 px (ref backend), against timm's formulas computed here in double on
 * the graph's own gradients:
 *   norm  torch.nn.utils.clip_grad_norm_: the total norm, and every grad
 *         times min(max_norm / (norm + 1e-6), 1);
 *   value torch.nn.utils.clip_grad_value_: every grad clamped to [-v, v];
 *   agc   timm.utils.agc.adaptive_clip_grad (clip 0.01, eps 1e-3) on every
 *         param but the last two (train.py's exclude_head);
 *   ema   ModelEmaV3 after k steps: the recurrence over the saved parameter
 *         and buffer trajectory (decay 0 at the first update).
 * The clipped gradient is read back as p - p' of an SGD step with lr 1 and
 * no momentum or weight decay. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "train_setup.h"

enum { B = 4, H = 32, CLASSES = 10 };
static float images[B * 3 * H * H];
static int64_t labels[B];

static void make_batch(void) { step_batch(images, sizeof images / sizeof *images, labels, B, CLASSES, 777, 3); }

typedef StepSetup Setup;

static int setup(Setup *u, const OptimSpec *opt) { return step_setup(u, "test_resnet", B, H, CLASSES, 0, opt, 3); }

static void teardown(Setup *u) { step_teardown(u); }

/* One step; out must hold g.noutputs tensors. */
static int step(Setup *u, float lr, float decay, CtTensor *out)
{
    float scale = 1;
    CtTensor in[5] = {{{{4, {B, 3, H, H}}, CT_F32}, images},
                      {{{1, {B}}, CT_I64}, labels},
                      {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale},
                      {{{0}, CT_F32}, &decay}};
    CtErr err = {{0}};
    int rc = backend_run_once(&ct_backend_ref, &u->g, &u->s, in, u->ts.ema_decay >= 0 ? 5 : 4, out, NULL, &err);
    CHECKF(rc == 0, "%s", err.msg);
    return rc;
}

static int output_index(const Graph *g, ValueId v)
{
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k] == v)
            return k;
    return -1;
}

/* timm's unitwise_norm of x (shape s) for unit u: all of x when ndim <= 1. */
static double unit_norm(const float *x, const CtShape *s, int64_t u, int64_t per)
{
    double n = 0;
    for (int64_t i = 0; i < per; i++)
        n += (double)x[u * per + i] * x[u * per + i];
    (void)s;
    return sqrt(n);
}

static void test_clip(CtClipMode mode, double v, const char *what)
{
    Setup u;
    OptimSpec opt = {.kind = CT_OPT_MOMENTUM, .clip_mode = mode, .clip_grad = v, .grads_out = 1};
    if (setup(&u, &opt))
        return;
    unsigned char *before = malloc(u.s.nbytes);
    memcpy(before, u.s.data, u.s.nbytes);
    CtTensor *out = calloc((size_t)u.g.noutputs, sizeof *out);
    if (step(&u, 1, 0, out) == 0) {
        int np = u.ts.nparams;
        const float **gr = malloc(sizeof *gr * (size_t)np);
        double total = 0;
        for (int k = 0; k < np; k++) {
            int o = output_index(&u.g, u.ts.grads[k]);
            gr[k] = out[o].data;
            int64_t n = shape_numel(&out[o].type.shape);
            for (int64_t i = 0; i < n; i++)
                total += (double)gr[k][i] * gr[k][i];
        }
        double norm = sqrt(total), coef = 1;
        if (mode == CT_CLIP_NORM) {
            int o = output_index(&u.g, u.ts.grad_norm_sq);
            CHECK(o >= 0);
            double got = o >= 0 ? sqrt(*(float *)out[o].data) : NAN;
            CHECKF(fabs(got - norm) <= 1e-5 * norm, "total norm %.9g, timm's %.9g", got, norm);
            coef = fmin(v / (norm + 1e-6), 1);
            CHECKF(norm > v, "the test needs a norm above --clip-grad %g (%g)", v, norm);
        }
        double worst = 0;
        long clipped = 0, units = 0;
        for (int k = 0; k < np; k++) {
            int si = state_find(&u.s, u.g.values[u.ts.params[k]].name);
            const StateEntry *e = &u.s.e[si];
            const float *p0 = (const float *)(before + e->offset), *p1 = state_data(&u.s, si);
            int64_t n = shape_numel(&e->type.shape);
            int64_t nunits = e->type.shape.ndim <= 1 ? 1 : e->type.shape.d[0], per = n / nunits;
            for (int64_t un = 0; un < nunits; un++) {
                double f = coef;
                if (mode == CT_CLIP_AGC && k < np - 2) {
                    double maxn = fmax(unit_norm(p0, &e->type.shape, un, per), 1e-3) * v;
                    double gn = unit_norm(gr[k], &e->type.shape, un, per);
                    f = gn < maxn ? 1 : maxn / fmax(gn, 1e-6);
                    clipped += gn >= maxn;
                    units++;
                }
                for (int64_t i = un * per; i < (un + 1) * per; i++) {
                    double want = mode == CT_CLIP_VALUE ? fmin(fmax(gr[k][i], -v), v) : gr[k][i] * f;
                    clipped += mode == CT_CLIP_VALUE && fabs(gr[k][i]) > v;
                    double got = (double)p0[i] - (double)p1[i];
                    double d = fabs(got - want) / (1e-6 + 1e-4 * fabs(want));
                    worst = d > worst ? d : worst;
                }
            }
        }
        printf("clip %s %g: total norm %.4g, %ld clipped (%s), worst error / tolerance %.3f\n", what, v, norm,
               clipped, mode == CT_CLIP_AGC ? "units" : "elements", worst);
        CHECKF(worst <= 1, "clip %s: the update's gradient differs from timm's clipped one", what);
        CHECKF(mode == CT_CLIP_NORM || clipped > 0, "clip %s: nothing was clipped, the test shows nothing", what);
        free(gr);
    }
    for (int k = 0; k < u.g.noutputs; k++)
        tensor_free(&out[k]);
    free(out);
    free(before);
    teardown(&u);
}

/* ModelEmaV3.get_decay without warmup: 0 at the first update. */
static double ema_decay(int step, double decay) { return step <= 1 ? 0 : decay; }

static void test_ema(void)
{
    enum { STEPS = 3 };
    const double decay = 0.9;
    Setup u;
    OptimSpec opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4, .model_ema = 1};
    if (setup(&u, &opt))
        return;
    CHECK(u.ts.ema_decay >= 0);
    /* the host's recurrence, one double per element of each param and buffer */
    double *ema = calloc(u.s.nbytes, sizeof *ema);
    CtTensor *out = calloc((size_t)u.g.noutputs, sizeof *out);
    for (int n = 1; n <= STEPS; n++) {
        double d = ema_decay(n, decay);
        if (step(&u, 0.05f, (float)d, out))
            break;
        for (int k = 0; k < u.g.noutputs; k++)
            tensor_free(&out[k]);
        for (int i = 0; i < u.s.n; i++) {
            const StateEntry *e = &u.s.e[i];
            if (e->role != CT_ROLE_PARAM && e->role != CT_ROLE_BUFFER)
                continue;
            int64_t cnt = shape_numel(&e->type.shape);
            double *h = ema + e->offset;
            for (int64_t j = 0; j < cnt; j++) {
                double now = e->type.dtype == CT_F32 ? ((float *)state_data(&u.s, i))[j]
                                                     : (double)((int64_t *)state_data(&u.s, i))[j];
                h[j] = e->type.dtype == CT_F32 ? d * h[j] + (1 - d) * now : now;
            }
        }
    }
    double worst = 0, moved = 0;
    int checked = 0;
    for (int i = 0; i < u.s.n; i++) {
        const StateEntry *e = &u.s.e[i];
        if (e->role != CT_ROLE_PARAM && e->role != CT_ROLE_BUFFER)
            continue;
        char name[600];
        snprintf(name, sizeof name, "ema.%s", e->name);
        int ei = state_find(&u.s, name);
        CHECKF(ei >= 0, "no %s", name);
        if (ei < 0)
            continue;
        CHECK(u.s.e[ei].type.dtype == e->type.dtype);
        int64_t cnt = shape_numel(&e->type.shape);
        const double *h = ema + e->offset;
        for (int64_t j = 0; j < cnt; j++) {
            double got = e->type.dtype == CT_F32 ? ((float *)state_data(&u.s, ei))[j]
                                                 : (double)((int64_t *)state_data(&u.s, ei))[j];
            double p = e->type.dtype == CT_F32 ? ((float *)state_data(&u.s, i))[j]
                                               : (double)((int64_t *)state_data(&u.s, i))[j];
            double r = fabs(got - h[j]) / (1e-6 + 1e-5 * fabs(h[j]));
            worst = r > worst ? r : worst;
            moved = fmax(moved, fabs(got - p));
        }
        checked++;
    }
    printf("ema: %d tensors after %d steps, worst error / tolerance %.3f, largest |ema - model| %.3g\n", checked,
           STEPS, worst, moved);
    CHECKF(worst <= 1, "ema differs from ModelEmaV3's recurrence");
    CHECKF(moved > 0, "ema equals the model: the decay did nothing");
    free(out);
    free(ema);
    teardown(&u);
}

int main(void)
{
    make_batch();
    test_clip(CT_CLIP_NORM, 0.1, "norm");
    test_clip(CT_CLIP_VALUE, 1e-3, "value");
    test_clip(CT_CLIP_AGC, 0.01, "agc");
    test_ema();
    return check_done("test_clip_ema");
}
