#include "train/dist_sync.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int train_share_state(CtDist *d, CtState *s, CtErr *err)
{
    if (dist_world_size(d) == 1)
        return 0;
    if (dist_broadcast(d, s->data, s->nbytes, 0, err))
        return ct_failctx(err, "sharing rank 0's state");
    int c = state_find(s, "rng.counter");
    if (c >= 0)
        *(int64_t *)state_data(s, c) += (int64_t)dist_rank(d) << 40;
    return 0;
}

int train_reduce_meter(CtDist *d, EvalMeter *m, CtErr *err)
{
    double sums[4] = {m->loss_sum, m->top1, m->top5, (double)m->seen};
    if (dist_allreduce_sum(d, sums, 4, err))
        return -1;
    *m = (EvalMeter){.loss_sum = sums[0], .top1 = sums[1], .top5 = sums[2], .seen = (size_t)sums[3]};
    return 0;
}

static int is_bn_stat(const StateEntry *e)
{
    return e->type.dtype == CT_F32 && (strstr(e->name, "running_mean") || strstr(e->name, "running_var"));
}

int train_sync_bn(CtDist *d, CtState *s, int reduce, CtErr *err)
{
    int world = dist_world_size(d);
    for (int i = 0; i < s->n && world > 1; i++) {
        if (!is_bn_stat(&s->e[i]))
            continue;
        float *v = state_data(s, i);
        size_t n = (size_t)shape_numel(&s->e[i].type.shape);
        if (!reduce) {
            if (dist_broadcast(d, v, n * sizeof *v, 0, err))
                return -1;
            continue;
        }
        double *t = malloc(sizeof *t * (n ? n : 1));
        CT_ASSERT(t != NULL);
        for (size_t k = 0; k < n; k++)
            t[k] = v[k];
        int rc = dist_allreduce_sum(d, t, n, err);
        for (size_t k = 0; k < n && !rc; k++)
            v[k] = (float)(t[k] / world);
        free(t);
        if (rc)
            return -1;
    }
    return 0;
}

int train_check_params(CtDist *d, const CtState *s, CtErr *err)
{
    const void **chunk = malloc(sizeof *chunk * (size_t)(s->n + 1));
    size_t *size = malloc(sizeof *size * (size_t)(s->n + 1));
    CT_ASSERT(chunk && size);
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->e[i].role == CT_ROLE_PARAM || !strncmp(s->e[i].name, "optim.", 6)) {
            chunk[n] = state_data(s, i);
            size[n++] = (size_t)shape_numel(&s->e[i].type.shape) * ct_dtype_size(s->e[i].type.dtype);
        }
    int rc = dist_check_identical(d, chunk, size, n, "parameters or optimizer state", err);
    free(chunk);
    free(size);
    return rc;
}
