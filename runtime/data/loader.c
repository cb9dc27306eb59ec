/*
 * The loader's machinery: one mutex, two condition variables, a ring of
 * batch slots. Work is the epoch's samples in order ("tasks"); task t
 * belongs to batch t / B, which lives in slot (t / B) % K. A worker may
 * take task t only while that slot is assigned to that batch, i.e. after
 * the consumer has released the batch K before it. The consumer waits for
 * its next batch's slot to have all samples done. Epochs are numbered by a
 * generation: work finished for an abandoned epoch is dropped.
 */
#include "runtime/data/loader.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/wds.h"

#define NONE ((size_t)-1)
#define DEFAULT_RETRIES 20 /* timm's ImageDataset _ERROR_RETRY */

typedef struct Slot {
    Batch b;
    size_t batch;    /* the batch assigned to this slot, NONE when none */
    int remaining;   /* samples still to be made */
    int ready;
    int failed;
    size_t fail_task; /* the earliest failed sample, so the message is deterministic */
    char msg[sizeof(((CtErr *)0)->msg)];
} Slot;

typedef struct Worker {
    struct Loader *L;
    DatasetReader *reader;
    pthread_t thread;
    int started;
} Worker;

struct Loader {
    const Dataset *ds;
    LoaderConfig cfg;
    TrainTransform train;
    EvalTransform eval;
    int img_size;
    size_t sample_bytes;
    size_t nds;        /* dataset samples */
    size_t nlist;      /* nds * repeats: the list that is shuffled (aug_repeats: the repeated list) */
    size_t nsampler;   /* aug_repeats: the list RepeatAugSampler permutes, nds * repeats */
    size_t *perm;      /* [nsampler] its permutation */
    size_t per_rank;   /* samples per epoch for this rank, after padding */
    size_t nbatches, ntasks;
    size_t *order;     /* [nlist]; wds: [per_rank], this rank's samples in order */
    int wds;           /* a WebDataset: epochs made by wds_epoch_order */
    WdsPlan plan;

    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* workers wait here */
    pthread_cond_t done_cv; /* the consumer and start_epoch wait here */
    pthread_mutex_t warn_mu;
    uint8_t *warned;   /* a bit per dataset index: its warning was given */
    int stop;
    int active;        /* an epoch is running */
    uint64_t epoch, gen;
    size_t next_task;  /* the next task a worker takes */
    size_t cur;        /* the next batch the consumer gets */
    int holding;       /* the consumer holds batch cur - 1 */
    int inflight;      /* tasks being worked on */
    Slot *slots;
    int nslots;
    Worker *workers;
    int nworkers;
};

static size_t batch_count(const Loader *L, size_t b)
{
    size_t B = (size_t)L->cfg.batch_size, left = L->ntasks - b * B;
    return left < B ? left : B;
}

static void assign_slot(Loader *L, Slot *s, size_t b)
{
    s->batch = b < L->nbatches ? b : NONE;
    s->remaining = s->batch == NONE ? 0 : (int)batch_count(L, b);
    s->ready = 0;
    s->failed = 0;
    s->fail_task = NONE;
    s->msg[0] = 0;
}

static void emit_warning(Loader *L, size_t i, const char *why)
{
    pthread_mutex_lock(&L->warn_mu);
    int first = !(L->warned[i / 8] & (1u << (i % 8)));
    L->warned[i / 8] |= (uint8_t)(1u << (i % 8));
    pthread_mutex_unlock(&L->warn_mu);
    if (!first)
        return;
    char name[512], msg[1200];
    dataset_sample_name(L->ds, i, name, sizeof name);
    snprintf(msg, sizeof msg, "skipped sample %zu (%s): %s", i, name, why);
    if (L->cfg.warn)
        L->cfg.warn(L->cfg.warn_ctx, msg);
    else
        fprintf(stderr, "ctimm: warning: %s\n", msg);
}

/* Makes task t's sample into its place in slot s. */
static int make_sample(Loader *L, Worker *w, size_t t, Slot *s, uint64_t epoch, CtErr *err)
{
    const LoaderConfig *c = &L->cfg;
    size_t B = (size_t)c->batch_size, j = t % B, cnt = batch_count(L, t / B);
    uint64_t pos = (uint64_t)c->rank + (uint64_t)t * (uint64_t)c->world_size;
    size_t first = L->wds ? L->order[t] : L->order[pos % L->nlist];
    /* split k of the batch's cnt samples at [k * cnt, (k + 1) * cnt), as timm's fast_collate lays them */
    int splits = c->aug_splits > 1 ? c->aug_splits : 1;
    uint8_t *out[CT_MAX_AUG_SPLITS];
    for (int k = 0; k < splits; k++)
        out[k] = s->b.images + ((size_t)k * cnt + j) * L->sample_bytes;
    CtErr e;
    int retries = c->max_retries > 0 ? c->max_retries : DEFAULT_RETRIES;
    for (int a = 0; a < retries; a++) {
        size_t i = (first + (size_t)a) % L->nds;
        const uint8_t *data;
        size_t n;
        int rc = dataset_read(w->reader, i, &data, &n, &e);
        if (rc == 0) {
            CtRng rng = rng_for(c->seed, epoch, pos);
            if (c->train)
                rc = transform_train_splits(&L->train, data, n, &rng, splits, out, &e);
            else if (c->eval)
                rc = transform_eval(&L->eval, data, n, out[0], &e);
            else
                rc = c->sample_fn(c->sample_ctx, data, n, &rng, out[0], &e);
        }
        if (rc == 0) {
            for (int k = 0; k < splits; k++) {
                s->b.labels[(size_t)k * cnt + j] = dataset_label(L->ds, i);
                s->b.samples[(size_t)k * cnt + j] = (int64_t)i;
            }
            return 0;
        }
        emit_warning(L, i, e.msg);
    }
    char name[512];
    dataset_sample_name(L->ds, first, name, sizeof name);
    return ct_fail(err, "%d consecutive samples failed to load, from %s on (last: %s)", retries, name, e.msg);
}

static void *worker_main(void *arg)
{
    Worker *w = arg;
    Loader *L = w->L;
    size_t B = (size_t)L->cfg.batch_size;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->stop && !(L->active && L->next_task < L->ntasks &&
                             L->slots[(L->next_task / B) % (size_t)L->nslots].batch == L->next_task / B))
            pthread_cond_wait(&L->work_cv, &L->mu);
        if (L->stop)
            break;
        size_t t = L->next_task++;
        uint64_t gen = L->gen, epoch = L->epoch;
        Slot *s = &L->slots[(t / B) % (size_t)L->nslots];
        L->inflight++;
        pthread_mutex_unlock(&L->mu);

        CtErr err;
        int rc = make_sample(L, w, t, s, epoch, &err);

        pthread_mutex_lock(&L->mu);
        L->inflight--;
        if (gen == L->gen) {
            if (rc && t < s->fail_task) {
                s->failed = 1;
                s->fail_task = t;
                memcpy(s->msg, err.msg, sizeof s->msg);
            }
            if (--s->remaining == 0) {
                s->ready = 1;
                pthread_cond_broadcast(&L->done_cv);
            }
        }
        if (L->inflight == 0)
            pthread_cond_broadcast(&L->done_cv);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

static void free_batch_mem(Loader *L, void *p)
{
    if (!p)
        return;
    if (L->cfg.free)
        L->cfg.free(L->cfg.alloc_ctx, p);
    else
        free(p);
}

static void *alloc_batch_mem(Loader *L, size_t n)
{
    return L->cfg.alloc ? L->cfg.alloc(L->cfg.alloc_ctx, n) : malloc(n);
}

void loader_destroy(Loader *L)
{
    if (!L)
        return;
    pthread_mutex_lock(&L->mu);
    L->stop = 1;
    pthread_cond_broadcast(&L->work_cv);
    pthread_cond_broadcast(&L->done_cv);
    pthread_mutex_unlock(&L->mu);
    for (int i = 0; i < L->nworkers; i++) {
        if (L->workers[i].started)
            pthread_join(L->workers[i].thread, NULL);
        dataset_reader_close(L->workers[i].reader);
    }
    for (int i = 0; i < L->nslots; i++) {
        free_batch_mem(L, L->slots[i].b.images);
        free(L->slots[i].b.labels);
        free(L->slots[i].b.samples);
    }
    pthread_mutex_destroy(&L->mu);
    pthread_mutex_destroy(&L->warn_mu);
    pthread_cond_destroy(&L->work_cv);
    pthread_cond_destroy(&L->done_cv);
    free(L->slots);
    free(L->workers);
    free(L->order);
    free(L->perm);
    free(L->warned);
    free(L);
}

static int check_config(const Dataset *ds, const LoaderConfig *c, CtErr *err)
{
    int nt = !!c->train + !!c->eval + !!c->sample_fn;
    if (nt != 1)
        return ct_fail(err, "loader: give exactly one of a train transform, an eval transform or a sample function");
    if (c->batch_size < 1 || c->batch_size > 1 << 20)
        return ct_fail(err, "loader: batch size %d out of range", c->batch_size);
    if (c->num_workers < 1 || c->num_workers > 1024)
        return ct_fail(err, "loader: %d workers (need 1..1024)", c->num_workers);
    if (c->queue_depth < 0 || c->queue_depth > 64)
        return ct_fail(err, "loader: queue depth %d (need 1..64, or 0 for the default)", c->queue_depth);
    if (c->world_size < 1 || c->rank < 0 || c->rank >= c->world_size)
        return ct_fail(err, "loader: rank %d out of range for world size %d", c->rank, c->world_size);
    if (c->repeats < 0 || c->repeats > 1000000)
        return ct_fail(err, "loader: repeats %d out of range", c->repeats);
    if (c->max_retries < 0)
        return ct_fail(err, "loader: negative max_retries");
    if (c->aug_splits < 0 || c->aug_splits > CT_MAX_AUG_SPLITS || (c->aug_splits > 1 && !c->train))
        return ct_fail(err, "loader: aug_splits %d (0..%d, with a train transform)", c->aug_splits,
                       CT_MAX_AUG_SPLITS);
    if (!(c->aug_repeats >= 0 && c->aug_repeats <= 1000))
        return ct_fail(err, "loader: aug_repeats %g out of range (0..1000)", c->aug_repeats);
    int size = c->train ? c->train->img_size : c->eval ? c->eval->img_size : c->img_size;
    if (size < 1 || size > 8192)
        return ct_fail(err, "loader: image size %d out of range", size);
    if ((c->train && train_transform_check(c->train, err)) || (c->eval && eval_transform_check(c->eval, err)))
        return -1;
    if (dataset_len(ds) == 0)
        return ct_fail(err, "loader: dataset %s is empty", dataset_root(ds));
    if (!!c->alloc != !!c->free)
        return ct_fail(err, "loader: give both alloc and free, or neither");
    return 0;
}

int loader_create(Loader **out, const Dataset *ds, const LoaderConfig *cfg, CtErr *err)
{
    *out = NULL;
    if (check_config(ds, cfg, err))
        return -1;
    Loader *L = calloc(1, sizeof *L);
    if (!L)
        return ct_fail(err, "out of memory");
    L->ds = ds;
    L->cfg = *cfg;
    LoaderConfig *c = &L->cfg;
    if (c->train)
        L->train = *c->train;
    if (c->eval)
        L->eval = *c->eval;
    L->img_size = c->train ? c->train->img_size : c->eval ? c->eval->img_size : c->img_size;
    CtImgMode mode = c->train ? c->train->mode : c->eval ? c->eval->mode : CT_IMG_RGB;
    L->sample_bytes = (size_t)L->img_size * (size_t)L->img_size * (size_t)img_mode_channels(mode);
    L->nds = dataset_len(ds);
    size_t repeats = c->repeats ? (size_t)c->repeats : 1;
    L->nlist = L->nds * repeats;
    size_t W = (size_t)c->world_size, B = (size_t)c->batch_size;
    L->per_rank = (L->nlist + W - 1) / W;
    size_t nshards, num_samples;
    const size_t *shard_first;
    if (dataset_wds_shards(ds, &nshards, &shard_first, &num_samples) == 0) {
        if (c->aug_repeats > 0) { /* timm's samplers take no iterable dataset */
            free(L);
            return ct_fail(err, "--aug-repeats: a WebDataset has no sampler to repeat (timm refuses it too)");
        }
        L->wds = 1;
        L->plan = (WdsPlan){.nshards = nshards, .shard_first = shard_first, .num_samples = num_samples,
                            .training = c->shuffle, .seed = c->seed, .rank = c->rank, .world_size = c->world_size,
                            .num_workers = c->num_workers, .batch_size = c->batch_size};
        if (wds_plan_check(&L->plan, err)) {
            free(L);
            return -1;
        }
        L->per_rank = wds_rank_samples(&L->plan);
    } else if (c->aug_repeats > 0) {
        /* RepeatAugSampler.__init__ (selected_round 256, selected_ratio world_size) */
        double R = c->aug_repeats;
        size_t N = L->nlist, sel;
        num_samples = (size_t)ceil((double)N * R / (double)W);
        sel = N >= 256 ? (size_t)floor((double)(N / 256 * 256) / (double)W) : (size_t)ceil((double)N / (double)W);
        L->nsampler = N;
        L->nlist = R == floor(R) ? N * (size_t)R : (size_t)ceil(R * (double)N);
        L->per_rank = sel < num_samples ? sel : num_samples;
    }
    L->nbatches = c->drop_last ? L->per_rank / B : (L->per_rank + B - 1) / B;
    L->ntasks = c->drop_last ? L->nbatches * B : L->per_rank;
    L->nslots = c->queue_depth ? c->queue_depth : 3;
    L->nworkers = c->num_workers;
    pthread_mutex_init(&L->mu, NULL);
    pthread_mutex_init(&L->warn_mu, NULL);
    pthread_cond_init(&L->work_cv, NULL);
    pthread_cond_init(&L->done_cv, NULL);

    L->order = malloc((L->wds ? L->per_rank + 1 : L->nlist ? L->nlist : 1) * sizeof *L->order);
    if (c->aug_repeats > 0 && !(L->perm = malloc(L->nsampler * sizeof *L->perm))) {
        loader_destroy(L);
        return ct_fail(err, "out of memory");
    }
    L->warned = calloc((L->nds + 7) / 8, 1);
    L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
    L->workers = calloc((size_t)L->nworkers, sizeof *L->workers);
    if (!L->order || !L->warned || !L->slots || !L->workers) {
        loader_destroy(L);
        return ct_fail(err, "out of memory");
    }
    for (int i = 0; i < L->nslots; i++) {
        Slot *s = &L->slots[i];
        s->b.img_size = L->img_size;
        size_t per = B * (size_t)(c->aug_splits > 1 ? c->aug_splits : 1);
        s->b.splits = c->aug_splits > 1 ? c->aug_splits : 1;
        s->b.images = alloc_batch_mem(L, per * L->sample_bytes);
        s->b.labels = malloc(per * sizeof *s->b.labels);
        s->b.samples = malloc(per * sizeof *s->b.samples);
        s->batch = NONE;
        if (!s->b.images || !s->b.labels || !s->b.samples) {
            loader_destroy(L);
            return ct_fail(err, "loader: out of memory for %d batches of %zu bytes", L->nslots, per * L->sample_bytes);
        }
    }
    for (int i = 0; i < L->nworkers; i++) {
        Worker *w = &L->workers[i];
        w->L = L;
        if (dataset_reader_open(&w->reader, ds, err)) {
            loader_destroy(L);
            return -1;
        }
    }
    for (int i = 0; i < L->nworkers; i++) {
        Worker *w = &L->workers[i];
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            loader_destroy(L);
            return ct_fail(err, "loader: cannot start worker thread %d of %d", i + 1, c->num_workers);
        }
        w->started = 1;
    }
    *out = L;
    return 0;
}

size_t loader_epoch_samples(const Loader *L) { return L->ntasks; }
size_t loader_epoch_batches(const Loader *L) { return L->nbatches; }

/* Python's float floor division a // b for a >= 0, b > 0 (through fmod, as
 * CPython computes it, not floor(a / b)). */
static double py_floordiv(double a, double b)
{
    double mod = fmod(a, b), div = (a - mod) / b, fl = floor(div);
    return div - fl > 0.5 ? fl + 1 : fl;
}

/* RepeatAugSampler.__iter__'s index list into order (as dataset indices). */
static int repeat_aug_order(Loader *L, uint64_t epoch)
{
    size_t N = L->nsampler;
    double R = L->cfg.aug_repeats;
    if (L->cfg.shuffle) {
        if (torch_randperm(epoch, N, L->perm))
            return -1;
    } else {
        for (size_t i = 0; i < N; i++)
            L->perm[i] = i;
    }
    for (size_t i = 0; i < L->nlist; i++) {
        size_t k = R == floor(R) ? i / (size_t)R : (size_t)py_floordiv((double)i, R);
        L->order[i] = L->perm[k] % L->nds;
    }
    return 0;
}

int loader_start_epoch(Loader *L, uint64_t epoch, CtErr *err) { return loader_start_epoch_at(L, epoch, 0, err); }

int loader_start_epoch_at(Loader *L, uint64_t epoch, size_t first, CtErr *err)
{
    if (first > L->nbatches)
        return ct_fail(err, "loader: batch %zu is past the epoch's %zu batches", first, L->nbatches);
    pthread_mutex_lock(&L->mu);
    /* abandon the current epoch: no new tasks; wait for those in flight */
    L->gen++;
    L->active = 0;
    L->holding = 0;
    while (L->inflight > 0)
        pthread_cond_wait(&L->done_cv, &L->mu);
    L->epoch = epoch;
    if (L->wds) {
        if (wds_epoch_order(&L->plan, epoch, L->order, err)) {
            pthread_mutex_unlock(&L->mu);
            return -1;
        }
    } else if (L->cfg.aug_repeats > 0) {
        if (repeat_aug_order(L, epoch)) {
            pthread_mutex_unlock(&L->mu);
            return ct_fail(err, "loader: %zu samples are too many for torch's randperm path", L->nsampler);
        }
    } else {
        for (size_t i = 0; i < L->nlist; i++)
            L->order[i] = i % L->nds;
    }
    if (L->cfg.shuffle && L->cfg.aug_repeats == 0 && !L->wds) {
        CtRng rng = rng_for(L->cfg.seed, epoch, UINT64_MAX);
        for (size_t i = L->nlist; i-- > 1;) {
            size_t j = (size_t)rng_below(&rng, (uint64_t)i + 1);
            size_t tmp = L->order[i];
            L->order[i] = L->order[j];
            L->order[j] = tmp;
        }
    }
    for (size_t b = first; b < first + (size_t)L->nslots; b++)
        assign_slot(L, &L->slots[b % (size_t)L->nslots], b);
    L->next_task = first * (size_t)L->cfg.batch_size;
    L->cur = first;
    L->active = 1;
    pthread_cond_broadcast(&L->work_cv);
    pthread_mutex_unlock(&L->mu);
    return 0;
}

int loader_next(Loader *L, const Batch **batch, CtErr *err)
{
    *batch = NULL;
    pthread_mutex_lock(&L->mu);
    if (!L->active) {
        pthread_mutex_unlock(&L->mu);
        return ct_fail(err, "loader: no epoch started (call loader_start_epoch first)");
    }
    if (L->holding) {
        size_t done = L->cur - 1;
        assign_slot(L, &L->slots[done % (size_t)L->nslots], done + (size_t)L->nslots);
        L->holding = 0;
        pthread_cond_broadcast(&L->work_cv);
    }
    if (L->cur >= L->nbatches) {
        pthread_mutex_unlock(&L->mu);
        return 0;
    }
    Slot *s = &L->slots[L->cur % (size_t)L->nslots];
    while (!s->ready && !L->stop)
        pthread_cond_wait(&L->done_cv, &L->mu);
    if (s->failed || !s->ready) {
        int rc = ct_fail(err, "loader: batch %zu of epoch %llu: %s", L->cur, (unsigned long long)L->epoch,
                         s->failed ? s->msg : "stopped");
        pthread_mutex_unlock(&L->mu);
        return rc;
    }
    s->b.index = L->cur;
    s->b.n = (int)batch_count(L, L->cur);
    L->cur++;
    L->holding = 1;
    *batch = &s->b;
    pthread_mutex_unlock(&L->mu);
    return 1;
}
