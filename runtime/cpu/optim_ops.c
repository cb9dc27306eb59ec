/*
 * The cpu backend's optimizer updates of one parameter, f32 storage with
 * the arithmetic in double (the ref kernels' rules): sgd_update and
 * adamw_update, whose `step` input stays an i64 scalar.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/cpu/cpu.h"

void cpu_sgd_update(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    double lr = in[3][0], m = n->fattr[0], wd = n->fattr[1];
    int nesterov = (int)n->iattr[0];
    if (n->nin == 5 && in[4][0] == 0) {
        memmove(out[0], in[0], (size_t)cnt * sizeof(float));
        memmove(out[1], in[2], (size_t)cnt * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < cnt; i++) {
        double d = in[1][i] + wd * in[0][i];
        double buf = m * in[2][i] + d;
        if (m != 0)
            d = nesterov ? d + m * buf : buf;
        out[0][i] = (float)(in[0][i] - lr * d);
        out[1][i] = (float)buf;
    }
}

void cpu_adamw_update(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    double lr = in[4][0], t = (double)*(const int64_t *)(const void *)in[5] + 1;
    double b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2], wd = n->fattr[3];
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    if (n->nin == 7 && in[6][0] == 0) {
        memmove(out[0], in[0], (size_t)cnt * sizeof(float));
        memmove(out[1], in[2], (size_t)cnt * sizeof(float));
        memmove(out[2], in[3], (size_t)cnt * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < cnt; i++) {
        double p = in[0][i] * (1 - lr * wd), g1 = in[1][i];
        double m = b1 * in[2][i] + (1 - b1) * g1, v = b2 * in[3][i] + (1 - b2) * g1 * g1;
        out[0][i] = (float)(p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps));
        out[1][i] = (float)m;
        out[2][i] = (float)v;
    }
}
