#include "cli/eval.h"

#include <math.h>
#include <string.h>

void eval_normalise(const Batch *bt, int batch, const double *mean, const double *std, float *x)
{
    int s = bt->img_size;
    size_t plane = (size_t)s * s;
    memset(x, 0, sizeof *x * (size_t)batch * 3 * plane);
    for (int b = 0; b < bt->n; b++)
        for (size_t p = 0; p < plane; p++)
            for (int c = 0; c < 3; c++)
                x[((size_t)b * 3 + c) * plane + p] =
                    (float)((bt->images[((size_t)b * plane + p) * 3 + c] / 255.0 - mean[c]) / std[c]);
}

int eval_interp_parse(const char *name)
{
    static const char *const names[] = {[CT_INTERP_NEAREST] = "nearest", [CT_INTERP_BILINEAR] = "bilinear",
                                        [CT_INTERP_BICUBIC] = "bicubic"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, names[k]))
            return k;
    return -1;
}

int eval_rank(const float *row, int C, int64_t label)
{
    int above = 0;
    for (int c = 0; c < C; c++)
        above += row[c] > row[label] || (row[c] == row[label] && c < label);
    return above;
}

EvalBatch eval_meter_add(EvalMeter *m, const float *logits, int C, const int64_t *labels, int n)
{
    double loss = 0, c1 = 0, c5 = 0;
    for (int b = 0; b < n; b++) {
        const float *row = logits + (size_t)b * (size_t)C;
        double mx = row[0], s = 0;
        for (int c = 0; c < C; c++)
            mx = row[c] > mx ? row[c] : mx;
        for (int c = 0; c < C; c++)
            s += exp(row[c] - mx);
        loss += mx + log(s) - row[labels[b]];
        int r = eval_rank(row, C, labels[b]);
        c1 += r < 1;
        c5 += r < 5;
    }
    m->loss_sum += loss;
    m->top1 += c1;
    m->top5 += c5;
    m->seen += (size_t)n;
    return n ? (EvalBatch){loss / n, 100 * c1 / n, 100 * c5 / n} : (EvalBatch){0, 0, 0};
}

double eval_loss(const EvalMeter *m) { return m->seen ? m->loss_sum / (double)m->seen : NAN; }
double eval_top1(const EvalMeter *m) { return m->seen ? 100 * m->top1 / (double)m->seen : NAN; }
double eval_top5(const EvalMeter *m) { return m->seen ? 100 * m->top5 / (double)m->seen : NAN; }
