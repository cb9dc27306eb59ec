#include "train/meter.h"

#include <math.h>

#include "ir/status.h"

int eval_before(float a, int ia, float b, int ib)
{
    /* torch.topk's order: NaN above every number, then descending; NaN ties
     * NaN. A NaN logit is then never a hit by accident of `>` being false. */
    if (isnan(a) || isnan(b))
        return isnan(a) && (!isnan(b) || ia < ib);
    return a > b || (a == b && ia < ib);
}

int eval_rank(const float *row, int C, int64_t label)
{
    int above = 0;
    for (int c = 0; c < C; c++)
        above += eval_before(row[c], c, row[label], (int)label);
    return above;
}

EvalBatch eval_meter_add(EvalMeter *m, const float *logits, int C, const int64_t *labels, int n)
{
    double loss = 0, c1 = 0, c5 = 0;
    for (int b = 0; b < n; b++) {
        const float *row = logits + (size_t)b * (size_t)C;
        CT_ASSERT(labels[b] >= 0 && labels[b] < C); /* the callers refuse such data before any batch */
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
