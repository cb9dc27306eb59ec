/*
 * The data loader: worker threads turn a dataset's samples into batches of
 * uint8 NHWC images [B, S, S, C] (C 3, 1 or 4 as the transform's input_img_mode) and
 * int64 labels [B], handed out in order.
 *
 * An epoch's order is a pure function of (seed, epoch): the dataset's
 * indices (repeated `repeats` times) are shuffled by Fisher-Yates with
 * rng_for(seed, epoch, ~0), padded to a multiple of world_size by repeating
 * from the start and strided by rank, like torch's DistributedSampler;
 * drop_last drops a final short batch. Sample k of this rank's list has the
 * global position p = rank + k * world_size, and its transform draws from
 * rng_for(seed, epoch, p): batches are byte-identical for any number of
 * workers.
 *
 * With aug_repeats > 0 the order is timm's RepeatAugSampler instead: the
 * list's torch.randperm seeded by the epoch alone (torch's own generator,
 * reproduced), each index repeated aug_repeats times in a row (a fractional
 * count picks index floor(i / aug_repeats) for i < ceil(aug_repeats * n)),
 * strided by rank, and num_selected_samples per rank: the list length
 * rounded down to a multiple of 256 over world_size (below 256: rounded up
 * over world_size), at most ceil(n * aug_repeats / world_size). The
 * repeats of an image land on different ranks, each augmented by its own
 * position's generator.
 *
 * A WebDataset (dataset.h's CT_DS_WDS) has its epochs made as timm's
 * ReaderWds makes them (runtime/data/wds.h): shuffle stands for timm's
 * is_training, num_workers for the DataLoader's workers (which shards each
 * reads), `repeats` is unused (as in timm), and the epoch's length is
 * timm's. Its batches depend on num_workers, as timm's do; aug_repeats is
 * refused with it.
 *
 * A sample that fails to read or decode is replaced by the next dataset
 * index (as timm's ImageDataset retries), with one warning per file; after
 * max_retries consecutive failures the batch fails with an error.
 *
 * Memory: queue_depth batch buffers are allocated at creation and reused;
 * workers write samples straight into them. Several workers fill one batch
 * together (work is handed out a sample at a time), so the batch the
 * consumer waits for is always the one being worked on first.
 */
#ifndef CTIMM_LOADER_H
#define CTIMM_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"
#include "runtime/data/dataset.h"
#include "runtime/data/rng.h"
#include "runtime/data/transforms.h"

/* A per-sample transform: encoded bytes -> img_size * img_size * 3 bytes at
 * out. rng is the sample's generator. Returns 0 or -1 with err set. */
typedef int (*SampleFn)(void *ctx, const uint8_t *data, size_t n, CtRng *rng, uint8_t *out, CtErr *err);

typedef struct LoaderConfig {
    int batch_size;
    int num_workers;  /* threads, >= 1 */
    int queue_depth;  /* batch buffers; 0: 3 */
    /* the transform: exactly one of train, eval, sample_fn */
    const TrainTransform *train;
    const EvalTransform *eval;
    SampleFn sample_fn;
    void *sample_ctx;
    int img_size;     /* with sample_fn only (train/eval carry their own) */
    uint64_t seed;
    int shuffle;
    int drop_last;
    int rank, world_size; /* 0, 1 when not distributed */
    int repeats;          /* each epoch goes over the dataset this many times; 0: 1 */
    double aug_repeats;   /* > 0: timm's RepeatAugSampler (num_repeats) over that list; 0: off */
    int aug_splits;       /* > 1: timm's AugMixDataset, each sample a clean and aug_splits - 1 augmented
                           * images (transform_train_splits; train transform only); 0, 1: off */
    int max_retries;      /* consecutive bad samples before a batch fails; 0: 20 (timm) */
    /* warnings (skipped samples); NULL: printed to stderr */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
    /* batch buffer memory (e.g. pinned host memory); NULL: malloc/free */
    void *(*alloc)(void *ctx, size_t n);
    void (*free)(void *ctx, void *p);
    void *alloc_ctx;
} LoaderConfig;

typedef struct Batch {
    size_t index;     /* batch number in the epoch */
    int n;            /* samples: batch_size, or fewer in a last batch without drop_last */
    int splits;       /* images a sample: aug_splits, else 1 */
    int img_size;
    uint8_t *images;  /* [splits * n, img_size, img_size, C]: split k's n images at k * n, as timm's fast_collate */
    int64_t *labels;  /* [splits * n] */
    int64_t *samples; /* [splits * n] dataset index each image came from (after skips) */
} Batch;

typedef struct Loader Loader;

/* The dataset must outlive the loader. Starts the worker threads. */
int loader_create(Loader **out, const Dataset *ds, const LoaderConfig *cfg, CtErr *err);
/* Stops the workers (mid-epoch is fine), joins them, frees everything. */
void loader_destroy(Loader *L);

/* Samples (after padding) and batches per epoch for this rank. */
size_t loader_epoch_samples(const Loader *L);
size_t loader_epoch_batches(const Loader *L);

/* Starts epoch `epoch` (abandoning what is left of the current one). */
int loader_start_epoch(Loader *L, uint64_t epoch, CtErr *err);
/* The same, from batch `first` on: the batches are those the whole epoch
 * gives from there (a run resumed mid-epoch sees what it would have seen). */
int loader_start_epoch_at(Loader *L, uint64_t epoch, size_t first, CtErr *err);
/* Waits for the next batch: 1 and *batch set, 0 at the end of the epoch,
 * -1 on error. The batch stays valid until the next loader_next,
 * loader_start_epoch or loader_destroy; its buffer is then reused. */
int loader_next(Loader *L, const Batch **batch, CtErr *err);

#endif
