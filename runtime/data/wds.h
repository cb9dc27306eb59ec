/*
 * WebDataset epochs as timm's ReaderWds (readers/reader_wds.py) makes them,
 * over shards indexed up front (dataset.h's CT_DS_WDS):
 *
 *  - training: the shard list shuffled (webdataset's buffered _shuffle,
 *    buffer 500, initial 100) by a generator of (seed, epoch) that every rank
 *    and worker shares; not shuffled for evaluation.
 *  - the G = world_size * num_workers loader workers take the shards at
 *    positions g, g + G, ... (g = rank * num_workers + worker), and read their
 *    samples in order; training passes them through a sample buffer (buffer
 *    8192, initial 2048) of the worker's own generator.
 *  - training, or evaluation over several ranks: each worker's stream is
 *    repeated (reshuffled) or cut to wds_worker_samples (with_epoch);
 *    single-rank evaluation reads every shard once.
 *  - the rank's samples are its workers' batches in turn (torch's DataLoader
 *    over an IterableDataset: worker 0's first batch, worker 1's first, ...).
 *
 * Python's random.Random is not reproduced: ctimm's generator (rng.h) draws
 * the same kind of choices, so the structure (which worker reads which
 * shards, how far a sample can move, the epoch's length) is timm's but the
 * permutations are not.
 */
#ifndef CTIMM_DATA_WDS_H
#define CTIMM_DATA_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"
#include "runtime/data/rng.h"

#define WDS_SHARD_SHUFFLE 500
#define WDS_SHARD_INITIAL 100
#define WDS_SAMPLE_SHUFFLE 8192
#define WDS_SAMPLE_INITIAL 2048

/* webdataset's _shuffle: items enter a buffer (two at a time while it holds
 * fewer than bufsize); once it holds `initial`, each new entry is followed by
 * a uniformly chosen item leaving; the rest leave at the end in the same way.
 * in and out hold n items and may not overlap. */
void wds_shuffle(const size_t *in, size_t n, size_t bufsize, size_t initial, CtRng *rng, size_t *out);

/* webdataset's expand_urls: "::" separates patterns, each brace-expanded
 * ({a,b,c} lists; {000..009} ranges keep the zero padding of the first).
 * *out: a malloc'd array of malloc'd strings (wds_free_names). */
int wds_expand(const char *pattern, char ***out, size_t *n, CtErr *err);
void wds_free_names(char **names, size_t n);

/* ReaderWds._num_samples_per_worker. */
size_t wds_worker_samples(size_t num_samples, int world_size, int num_workers, int batch_size, int training);

typedef struct WdsPlan {
    size_t nshards;
    const size_t *shard_first; /* [nshards + 1]: shard s holds samples [first[s], first[s + 1]) */
    size_t num_samples;        /* the split's sample count (info, "|N", or --*-num-samples) */
    int training;
    uint64_t seed;
    int rank, world_size, num_workers, batch_size;
} WdsPlan;

/* Samples of one rank's epoch (what wds_epoch_order writes). */
size_t wds_rank_samples(const WdsPlan *p);
/* Checks the plan can make an epoch (every worker gets a shard when its
 * stream must be repeated). */
int wds_plan_check(const WdsPlan *p, CtErr *err);
/* The rank's sample indices of epoch `epoch`, wds_rank_samples of them. */
int wds_epoch_order(const WdsPlan *p, uint64_t epoch, size_t *out, CtErr *err);

#endif
