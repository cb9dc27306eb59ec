/*
 * The cpu backend's optimizer updates of one parameter, f32 storage with
 * the arithmetic in double (ir/formulas.h's rules, as the ref kernels'):
 * sgd_update and adamw_update (all its rules), whose `step` input stays an
 * i64 scalar. The other update ops run their ref kernels (LAMB and LARS
 * need whole-tensor norms before any output is written).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/cpu/cpu.h"

#define FX_T double
#define FX_EXP exp
#define FX_SQRT sqrt
#define FX_ERF erf
#define FX_TANH tanh
#define FX_POW pow
#include "ir/formulas.h"

void cpu_sgd_update(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    double lr = in[3][0], m = n->fattr[0], wd = n->fattr[1], dlr = n->fattr[2] > 0 ? lr * lr / n->fattr[2] : lr;
    int nesterov = (int)n->iattr[0], decoupled = (int)n->iattr[1], caution = (int)n->iattr[2];
    int apply = n->nin == 5 + (caution == 2);
    double keep = decoupled ? 1 - dlr * wd : 1; /* SGDW's p *= 1 - lr * wd before the step */
    double cmean = caution == 2 ? in[4][0] : 0;
    if (decoupled)
        wd = 0;
    if (caution != 1 && apply && in[n->nin - 1][0] == 0) {
        memmove(out[0], in[0], (size_t)cnt * sizeof(float));
        memmove(out[1], in[2], (size_t)cnt * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < cnt; i++) {
        double p, buf, pd = in[0][i] * keep;
        fx_sgd(pd, in[1][i], in[2][i], lr, m, wd, nesterov, &p, &buf);
        if (caution) { /* timm SGDW's: its direction against g */
            double u = fx_sgd_dir(in[1][i], buf, m, nesterov);
            if (caution == 1) {
                out[0][i] = 0 < u * in[1][i];
                continue;
            }
            p = pd - lr * fx_cautious(u, in[1][i], cmean);
        }
        out[0][i] = (float)p;
        out[1][i] = (float)buf;
    }
}

void cpu_adamw_update(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    double lr = in[4][0], t = (double)*(const int64_t *)(const void *)in[5] + 1;
    double b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2], wd = n->fattr[3];
    double dlr = n->fattr[4] > 0 ? lr * lr / n->fattr[4] : lr;
    int rule = (int)n->iattr[0], caution = (int)n->iattr[1], apply = n->nin == 7 + (caution == 2);
    double bc1 = fx_bias_correction(b1, t), bc2 = fx_bias_correction(b2, t), rect = rule == 2 ? fx_radam_rect(b2, t) : 0;
    double cmean = caution == 2 ? in[6][0] : 0;
    if (caution != 1 && apply && in[n->nin - 1][0] == 0) {
        memmove(out[0], in[0], (size_t)cnt * sizeof(float));
        memmove(out[1], in[2], (size_t)cnt * sizeof(float));
        memmove(out[2], in[3], (size_t)cnt * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < cnt; i++) {
        double p, m, v;
        fx_adam(in[0][i], in[1][i], in[2][i], in[3][i], lr, dlr, bc1, bc2, rect, rule, b1, b2, eps, wd, caution == 2,
                cmean, &p, &m, &v);
        if (caution == 1) { /* the mask alone */
            out[0][i] = 0 < m * in[1][i];
            continue;
        }
        out[0][i] = (float)p;
        out[1][i] = (float)m;
        out[2][i] = (float)v;
    }
}
