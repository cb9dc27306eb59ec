/* --grad-accum-steps in the training step (OptimSpec.grad_accum): two
 * micro-batches of 4 accumulated, then applied, give the parameters,
 * optimizer state and EMA of one step on the batch of 8 (train.py divides
 * each micro-batch's loss by the step count, so the summed gradient is the
 * big batch's mean). test_vit at 32 px has no batch norm or dropout, so the
 * two are the same function of the 8 images up to rounding. Also: the step
 * that does not update leaves every param, optimizer state and the step
 * count as they were and fills "accum.*", the updating step empties it; the
 * cpu backend's compiled step agrees with the ref backend's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "train_setup.h"

enum { B = 8, MICRO = 4, H = 32, CLASSES = 10 };
static float images[B * 3 * H * H];
static int64_t labels[B];

static void make_batch(void) { step_batch(images, sizeof images / sizeof *images, labels, B, CLASSES, 2024, 7); }

typedef StepSetup Setup;

static int setup(Setup *u, int batch, const OptimSpec *opt)
{
    return step_setup(u, "test_vit", batch, H, CLASSES, 0.1, opt, 5);
}

static void teardown(Setup *u) { step_teardown(u); }

/* One step on images [from, from + batch) with the trainer's scalars;
 * returns the loss (NAN on failure). */
static double step(const CtBackend *be, Setup *u, int from, int batch, float decay, float update, float unscale)
{
    float lr = 0.05f, scale = 1;
    CtTensor in[7] = {{{{4, {batch, 3, H, H}}, CT_F32}, images + (size_t)from * 3 * H * H},
                      {{{1, {batch}}, CT_I64}, labels + from},
                      {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    int nin = 4;
    if (u->ts.ema_decay >= 0)
        in[nin++] = (CtTensor){{{0}, CT_F32}, &decay};
    if (u->ts.update >= 0) {
        in[nin++] = (CtTensor){{{0}, CT_F32}, &update};
        in[nin++] = (CtTensor){{{0}, CT_F32}, &unscale};
    }
    CtTensor *out = calloc((size_t)u->g.noutputs, sizeof *out);
    CtErr err = {{0}};
    int rc = backend_run_once(be, &u->g, &u->s, in, nin, out, NULL, &err);
    CHECKF(rc == 0, "%s", err.msg);
    double loss = NAN;
    for (int k = 0; k < u->g.noutputs && rc == 0; k++)
        if (u->g.outputs[k] == u->ts.loss)
            loss = *(float *)out[k].data;
    for (int k = 0; k < u->g.noutputs; k++)
        tensor_free(&out[k]);
    free(out);
    return loss;
}

/* The state entries both setups have, copied from a to b by name (the
 * big-batch graph initialises the params; the other follows). */
static void copy_state(const CtState *a, CtState *b)
{
    for (int i = 0; i < b->n; i++) {
        int j = state_find(a, b->e[i].name);
        if (j >= 0)
            memcpy(state_data(b, i), state_data(a, j), (size_t)shape_numel(&b->e[i].type.shape) *
                                                            ct_dtype_size(b->e[i].type.dtype));
    }
}

/* max over the float entries of a (prefix `only`, or all) of ||a-b||/||b||. */
static double worst_rel(const CtState *a, const CtState *b, const char *only, const char **name)
{
    double worst = 0;
    for (int i = 0; i < a->n; i++) {
        const StateEntry *e = &a->e[i];
        int j = state_find(b, e->name);
        if (e->type.dtype != CT_F32 || j < 0 || (only && strncmp(e->name, only, strlen(only))))
            continue;
        const float *x = state_data(a, i), *y = state_data(b, j);
        double d = 0, n = 0;
        for (int64_t k = 0; k < shape_numel(&e->type.shape); k++) {
            d += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
            n += (double)y[k] * y[k];
        }
        double r = n > 0 ? sqrt(d / n) : sqrt(d);
        if (r > worst)
            worst = r, *name = e->name;
    }
    return worst;
}

/* Whether every float entry with the prefix is all zeros (exactly). */
static int all_zero(const CtState *s, const char *prefix, int *count)
{
    int zero = 1;
    *count = 0;
    for (int i = 0; i < s->n; i++) {
        if (strncmp(s->e[i].name, prefix, strlen(prefix)))
            continue;
        ++*count;
        const float *x = state_data(s, i);
        for (int64_t k = 0; k < shape_numel(&s->e[i].type.shape); k++)
            zero &= x[k] == 0;
    }
    return zero;
}

static int64_t step_count(const CtState *s)
{
    int i = state_find(s, "optim.step");
    return i < 0 ? -1 : *(const int64_t *)state_data(s, i);
}

static void test_accum(const char *what, OptimSpec opt, int with_cpu)
{
    Setup big, acc;
    if (setup(&big, B, &opt))
        return;
    opt.grad_accum = 2;
    if (setup(&acc, MICRO, &opt)) {
        teardown(&big);
        return;
    }
    CHECK(acc.ts.update >= 0 && acc.ts.unscale >= 0 && big.ts.update < 0);
    copy_state(&big.s, &acc.s);
    unsigned char *before = malloc(acc.s.nbytes);
    memcpy(before, acc.s.data, acc.s.nbytes);

    double want = step(&ct_backend_ref, &big, 0, B, 0, 0, 0);
    double l0 = step(&ct_backend_ref, &acc, 0, MICRO, 1, 0, 2);
    /* the step that does not update: only the accumulators (and the rng counter) move */
    double moved = 0;
    int nacc = 0;
    for (int i = 0; i < acc.s.n; i++) {
        const StateEntry *e = &acc.s.e[i];
        size_t bytes = (size_t)shape_numel(&e->type.shape) * ct_dtype_size(e->type.dtype);
        int changed = memcmp(before + e->offset, state_data(&acc.s, i), bytes) != 0;
        if (!strncmp(e->name, "accum.", 6))
            nacc++, moved += changed;
        else
            CHECKF(!changed || !strcmp(e->name, "rng.counter"), "%s: %s changed on a step without update", what,
                   e->name);
    }
    CHECKF(nacc == acc.ts.nparams && moved == nacc, "%s: %g of %d accumulators filled for %d params", what, moved,
           nacc, acc.ts.nparams);
    double l1 = step(&ct_backend_ref, &acc, MICRO, MICRO, 0, 1, 2);
    const char *name = "";
    double rp = worst_rel(&acc.s, &big.s, NULL, &name);
    int zeros = 0, emptied = all_zero(&acc.s, "accum.", &zeros);
    printf("%s: loss %.6f (micro-batches %.6f, %.6f), worst ||accum - big||/||big|| %.3g (%s), step %lld\n", what,
           want, l0, l1, rp, name, (long long)step_count(&acc.s));
    CHECKF(fabs((l0 + l1) / 2 - want) <= 1e-5 * fabs(want), "%s: the micro-batches' mean loss is not the batch's",
           what);
    CHECKF(rp <= 2e-5, "%s: %s after two accumulated micro-batches differs from one step on the batch", what, name);
    CHECKF(emptied && zeros == nacc, "%s: the accumulators were not emptied by the update", what);
    CHECKF(step_count(&acc.s) == step_count(&big.s), "%s: %lld updates counted, want %lld", what,
           (long long)step_count(&acc.s), (long long)step_count(&big.s));

    if (with_cpu) { /* the compiled step: the same two micro-steps from the same start */
        Setup cpu;
        if (setup(&cpu, MICRO, &opt) == 0) {
            memcpy(cpu.s.data, before, cpu.s.nbytes);
            step(&ct_backend_cpu, &cpu, 0, MICRO, 1, 0, 2);
            step(&ct_backend_cpu, &cpu, MICRO, MICRO, 0, 1, 2);
            double rc = worst_rel(&cpu.s, &acc.s, NULL, &name);
            printf("%s: cpu backend vs ref, worst %.3g (%s)\n", what, rc, name);
            CHECKF(rc <= 1e-5, "%s: the cpu backend's accumulated step differs from ref's (%s)", what, name);
            teardown(&cpu);
        }
    }
    free(before);
    teardown(&acc);
    teardown(&big);
}

int main(void)
{
    make_batch();
    test_accum("sgd nesterov, weight decay, clip norm",
               (OptimSpec){.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-2, .clip_mode = CT_CLIP_NORM,
                           .clip_grad = 0.5},
               1);
    test_accum("adamw, model ema",
               (OptimSpec){.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05,
                           .model_ema = 1},
               0);
    return check_done("test_grad_accum");
}
