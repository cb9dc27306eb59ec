/* Shared by the backend comparisons (test_cpu, tests/gpu): a test model's
 * reference vectors (tests/data/<model>.safetensors, from
 * tools/make_vectors.py) opened as a training step's inputs, and the
 * relative error they compare by. */
#ifndef CTIMM_TEST_MODEL_VECTORS_H
#define CTIMM_TEST_MODEL_VECTORS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "models/registry.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

/* The model's reference vectors: x, target, lr 0.1, loss scale. */
typedef struct Vectors {
    StFile f;
    const ModelEntry *m;
    ModelArgs args;
    int batch;
    float lr, scale;
    CtTensor in[4];
} Vectors;

static inline int vectors_open(Vectors *v, const char *model, float scale)
{
    char path[512];
    CtErr err;
    snprintf(path, sizeof path, "%s/%s.safetensors", test_data_dir(), model);
    int ok = st_read(path, &v->f, &err) == 0;
    CHECKF(ok, "%s", err.msg);
    if (!ok)
        return -1;
    const StTensor *x = st_find(&v->f, "input"), *t = st_find(&v->f, "target");
    v->m = model_find(model);
    v->args = model_args_default();
    if (st_meta(&v->f, "num_classes"))
        v->args.num_classes = atoi(st_meta(&v->f, "num_classes"));
    v->args.img_size = (int)x->shape[2];
    v->batch = (int)x->shape[0];
    v->lr = 0.1f;
    v->scale = scale;
    v->in[0] = (CtTensor){{shape_make(4, x->shape), CT_F32}, x->data};
    v->in[1] = (CtTensor){{shape_make(1, t->shape), CT_I64}, t->data};
    v->in[2] = (CtTensor){{{0}, CT_F32}, &v->lr};
    v->in[3] = (CtTensor){{{0}, CT_F32}, &v->scale};
    return 0;
}

/* ||a-b|| / ||b|| of two f32 arrays; where b is at most 1e-6 everywhere
 * (a gradient that is structurally zero, so float32 noise, as the reference
 * files' grad_structurally_zero), max |a-b| / 1e-2 instead, which passes
 * when the noise agrees to 1e-6 as ctimm-run --compare requires. */
static inline double rel_err(const float *a, const float *b, int64_t n)
{
    double diff = 0, norm = 0, maxb = 0, maxd = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        diff += d * d;
        norm += (double)b[i] * b[i];
        maxb = fabs(b[i]) > maxb ? fabs(b[i]) : maxb;
        maxd = fabs(d) > maxd || isnan(d) ? fabs(d) : maxd;
    }
    if (maxb <= 1e-6)
        return maxd / 1e-2;
    return sqrt(diff / norm);
}

#endif
