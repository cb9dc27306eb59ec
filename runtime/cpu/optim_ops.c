/*
 * The cpu backend's optimizer updates of one parameter, f32 storage with
 * the arithmetic in double (the ref kernels' rules): sgd_update and
 * adamw_update (all its rules), whose `step` input stays an i64 scalar. The
 * other update ops run their ref kernels (LAMB and LARS need whole-tensor
 * norms before any output is written).
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
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t), rect = 1;
    int rule = (int)n->iattr[0];
    if (n->nin == 7 && in[6][0] == 0) {
        memmove(out[0], in[0], (size_t)cnt * sizeof(float));
        memmove(out[1], in[2], (size_t)cnt * sizeof(float));
        memmove(out[2], in[3], (size_t)cnt * sizeof(float));
        return;
    }
    if (rule == 2) { /* RAdam's rectification, 0 while rho_t <= 5 */
        double rho_inf = 2 / (1 - b2) - 1, rho = rho_inf - 2 * t * pow(b2, t) / bc2;
        rect = rho > 5 ? sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)) : 0;
    }
    for (int64_t i = 0; i < cnt; i++) {
        double p = in[0][i], g1 = in[1][i];
        if (rule == 0 || rule == 3)
            p *= 1 - lr * wd;
        else
            g1 += wd * p;
        double m = b1 * in[2][i] + (1 - b1) * g1, r = rule == 3 ? g1 - m : g1;
        double v = b2 * in[3][i] + (1 - b2) * r * r + (rule == 3 ? eps : 0);
        if (rule == 2)
            p -= rect == 0 ? lr / bc1 * m : lr / bc1 * m * rect * sqrt(bc2) / (sqrt(v) + eps);
        else
            p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
        out[0][i] = (float)p;
        out[1][i] = (float)m;
        out[2][i] = (float)v;
    }
}
