/*
 * The cpu backend's gather and gather_grad (ir/ops/index.c) with the index
 * read in its own type (i32 or i64): x as [O, T, I] around dim, rows of I
 * floats copied out, or added back in double (the ref kernel's sums, in
 * its order of k) before rounding once. An index outside [0, T) gives a
 * row of zeros, and no gradient.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu.h"

/* index[k] of the node's input 1, or -1 when it lies outside [0, T). */
static int64_t index_at(const Graph *g, const Node *n, const void *index, int64_t k, int64_t T)
{
    int64_t t = g->values[n->in[1]].type.dtype == CT_I32 ? ((const int32_t *)index)[k] : ((const int64_t *)index)[k];
    return t >= 0 && t < T ? t : -1;
}

static void split_at(const CtShape *x, int64_t dim, int64_t *O, int64_t *T, int64_t *I)
{
    *O = *I = 1;
    for (int i = 0; i < dim; i++)
        *O *= x->d[i];
    *T = x->d[dim];
    for (int i = (int)dim + 1; i < x->ndim; i++)
        *I *= x->d[i];
}

void cpu_gather(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t O, T, I, K = cpu_in_numel(g, n, 1);
    split_at(cpu_in_shape(g, n, 0), n->iattr[0], &O, &T, &I);
#pragma omp parallel for if (O * K * I > CPU_PARALLEL_MIN)
    for (int64_t ok = 0; ok < O * K; ok++) {
        int64_t o = ok / K, t = index_at(g, n, in[1], ok % K, T);
        if (t < 0)
            memset(out[0] + ok * I, 0, sizeof(float) * (size_t)I);
        else
            memcpy(out[0] + ok * I, in[0] + (o * T + t) * I, sizeof(float) * (size_t)I);
    }
}

void cpu_gather_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t O, T, I, K = cpu_in_numel(g, n, 1);
    split_at(cpu_out_shape(g, n, 0), n->iattr[0], &O, &T, &I);
    int64_t count = O * T * I;
    double *acc = calloc((size_t)(count > 0 ? count : 1), sizeof *acc);
    CT_ASSERT(acc != NULL);
    /* each o owns its own rows of dx, so the samples split among threads */
#pragma omp parallel for if (O > 1 && O * K * I > CPU_PARALLEL_MIN)
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < K; k++) {
            int64_t t = index_at(g, n, in[1], k, T);
            if (t < 0)
                continue;
            double *d = acc + (o * T + t) * I;
            const float *s = in[0] + (o * K + k) * I;
            for (int64_t i = 0; i < I; i++)
                d[i] += s[i];
        }
    for (int64_t j = 0; j < count; j++)
        out[0][j] = (float)acc[j];
    free(acc);
}
