/*
 * The loader: byte-identical batches for 1, 2 and 4 workers (a hashing
 * sample function, then timm's real train and eval transforms); epoch order
 * (plain, shuffled, seeds, repeats), drop_last, the distributed sampler's
 * padding and striding; skipping corrupt images with one warning per file
 * (folder and tar), failing after max_retries consecutive bad ones;
 * restarting and stopping mid-epoch; configuration errors; batch memory
 * through the alloc hooks. Scratch files go to a fresh /tmp folder.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "runtime/data/loader.h"
#include "tests/check.h"

static char tmpdir[64];

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* A sample function that needs no decoder: the output mixes a hash of the
 * bytes with the sample's random draws, so a wrong sample, a wrong rng or
 * a missed write all show. Refuses data that is not a JPEG. */
static int hash_fn(void *ctx, const uint8_t *data, size_t n, CtRng *rng, uint8_t *out, CtErr *err)
{
    int size = *(const int *)ctx;
    if (n < 2 || data[0] != 0xFF || data[1] != 0xD8)
        return ct_fail(err, "not a JPEG");
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    for (int k = 0; k < size * size * 3; k++)
        out[k] = (uint8_t)((h >> (k % 8 * 8)) ^ rng_u64(rng));
    return 0;
}

/* Everything a loader produced over some epochs, concatenated. */
typedef struct Run {
    uint8_t *images;
    int64_t *labels, *samples;
    size_t n, bytes, cap;
    int nbatches, sizes[512];
    int failed;
    char msg[512];
} Run;

static void run_free(Run *r)
{
    free(r->images);
    free(r->labels);
    free(r->samples);
    memset(r, 0, sizeof *r);
}

static void run_add(Run *r, const Batch *b)
{
    size_t per = (size_t)b->img_size * b->img_size * 3;
    if (r->n + (size_t)b->n > r->cap) {
        r->cap = (r->n + (size_t)b->n) * 2;
        r->images = realloc(r->images, r->cap * per);
        r->labels = realloc(r->labels, r->cap * sizeof *r->labels);
        r->samples = realloc(r->samples, r->cap * sizeof *r->samples);
    }
    memcpy(r->images + r->n * per, b->images, (size_t)b->n * per);
    memcpy(r->labels + r->n, b->labels, (size_t)b->n * sizeof *r->labels);
    memcpy(r->samples + r->n, b->samples, (size_t)b->n * sizeof *r->samples);
    r->n += (size_t)b->n;
    r->bytes = r->n * per;
    if (r->nbatches < 512)
        r->sizes[r->nbatches] = b->n;
    r->nbatches++;
}

/* Runs epochs [e0, e1) and collects them. */
static Run run_epochs(const Dataset *ds, const LoaderConfig *cfg, int e0, int e1)
{
    Run r = {0};
    Loader *L;
    CtErr err;
    if (loader_create(&L, ds, cfg, &err)) {
        r.failed = 1;
        snprintf(r.msg, sizeof r.msg, "%s", err.msg);
        return r;
    }
    for (int e = e0; e < e1 && !r.failed; e++) {
        CHECK(loader_start_epoch(L, (uint64_t)e, &err) == 0);
        const Batch *b;
        int rc;
        size_t expect = 0;
        while ((rc = loader_next(L, &b, &err)) == 1) {
            CHECK(b->index == expect++);
            run_add(&r, b);
        }
        if (rc < 0) {
            r.failed = 1;
            snprintf(r.msg, sizeof r.msg, "%s", err.msg);
        } else {
            CHECK(expect == loader_epoch_batches(L));
            CHECK(loader_next(L, &b, &err) == 0); /* stays at the end */
        }
    }
    loader_destroy(L);
    return r;
}

static int same_run(const Run *a, const Run *b)
{
    return !a->failed && !b->failed && a->n == b->n && a->bytes == b->bytes && !memcmp(a->images, b->images, a->bytes) &&
           !memcmp(a->labels, b->labels, a->n * sizeof *a->labels) &&
           !memcmp(a->samples, b->samples, a->n * sizeof *a->samples);
}

static Dataset *synthetic(size_t n, int classes, int size)
{
    DatasetConfig dc = {.kind = CT_DS_SYNTHETIC, .synthetic_len = n, .synthetic_classes = classes,
                        .synthetic_img_size = size, .synthetic_seed = 11};
    Dataset *ds;
    CtErr err;
    if (dataset_open(&ds, &dc, &err)) {
        fprintf(stderr, "synthetic dataset: %s\n", err.msg);
        exit(1);
    }
    return ds;
}

static int OUT4 = 4;

static LoaderConfig hash_config(void)
{
    LoaderConfig c = {.batch_size = 8, .num_workers = 1, .sample_fn = hash_fn, .sample_ctx = &OUT4, .img_size = 4,
                      .seed = 5, .shuffle = 1, .world_size = 1};
    return c;
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void test_worker_counts(void)
{
    Dataset *ds = synthetic(53, 7, 16);
    LoaderConfig c = hash_config();
    Run ref = run_epochs(ds, &c, 0, 2);
    CHECKF(!ref.failed && ref.n == 2 * 53, "%s", ref.msg);
    const int workers[] = {2, 4, 4}, depth[] = {0, 1, 5};
    for (int i = 0; i < 3; i++) {
        c.num_workers = workers[i];
        c.queue_depth = depth[i];
        Run r = run_epochs(ds, &c, 0, 2);
        CHECKF(same_run(&ref, &r), "%d workers, queue depth %d: batches differ from 1 worker", workers[i], depth[i]);
        run_free(&r);
    }
    /* the two epochs are shuffled differently */
    size_t half = ref.bytes / 2;
    CHECK(memcmp(ref.samples, ref.samples + 53, 53 * sizeof *ref.samples) != 0);
    CHECK(memcmp(ref.images, ref.images + half, half) != 0);
    run_free(&ref);
    dataset_close(ds);
}

/* Starting an epoch at batch k gives the whole epoch's batches from k on,
 * with the workers' queue refilled from there (a run resumed mid-epoch). */
static void test_start_at(void)
{
    Dataset *ds = synthetic(53, 7, 16);
    LoaderConfig c = hash_config();
    c.num_workers = 2;
    Run ref = run_epochs(ds, &c, 1, 2);
    Loader *L;
    CtErr err;
    CHECKF(loader_create(&L, ds, &c, &err) == 0, "%s", err.msg);
    const size_t firsts[] = {3, 0, 6, 7};
    for (size_t i = 0; i < 4; i++) {
        Run r = {0};
        const Batch *b;
        size_t expect = firsts[i];
        CHECK(loader_start_epoch_at(L, 1, firsts[i], &err) == 0);
        while (loader_next(L, &b, &err) == 1) {
            CHECK(b->index == expect++);
            run_add(&r, b);
        }
        size_t skip = firsts[i] * (size_t)c.batch_size, per = 4 * 4 * 3;
        skip = skip < ref.n ? skip : ref.n;
        CHECKF(r.n == ref.n - skip && (r.n == 0 || (!memcmp(r.images, ref.images + skip * per, r.n * per) &&
                                                 !memcmp(r.samples, ref.samples + skip, r.n * sizeof *r.samples))),
               "starting at batch %zu: the batches differ from the whole epoch's", firsts[i]);
        run_free(&r);
    }
    CHECK(loader_start_epoch_at(L, 1, 8, &err) != 0 && strstr(err.msg, "past the epoch's 7 batches"));
    loader_destroy(L);
    run_free(&ref);
    dataset_close(ds);
}

static void test_real_transforms(void)
{
    Dataset *ds = synthetic(21, 10, 48);
    TrainTransform tt = train_transform_default(24);
    EvalTransform et = eval_transform_default(24);
    LoaderConfig c = {.batch_size = 5, .num_workers = 1, .train = &tt, .seed = 9, .shuffle = 1, .world_size = 1};
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1) {
            c.train = NULL;
            c.eval = &et;
            c.shuffle = 0;
        }
        Run ref = run_epochs(ds, &c, 3, 4);
        CHECKF(!ref.failed && ref.n == 21 && ref.nbatches == 5 && ref.sizes[4] == 1, "%s %s",
               mode ? "eval" : "train", ref.msg);
        for (int w = 2; w <= 4; w += 2) {
            c.num_workers = w;
            Run r = run_epochs(ds, &c, 3, 4);
            CHECKF(same_run(&ref, &r), "%s transform: %d workers differ from 1", mode ? "eval" : "train", w);
            run_free(&r);
        }
        c.num_workers = 1;
        /* not all one value: the images went through */
        int varied = 0;
        for (size_t i = 1; i < ref.bytes && !varied; i++)
            varied = ref.images[i] != ref.images[0];
        CHECK(varied);
        run_free(&ref);
    }
    dataset_close(ds);
}

enum { SPLIT_PX = 16 * 16 * 3, SPLIT_N = 11 };

/* One epoch with `splits` (0: off) into out[split][sample]; checks the
 * layout and that labels and indices repeat per split. */
static void collect_splits(const Dataset *ds, LoaderConfig *c, int splits, uint8_t (*out)[SPLIT_N][SPLIT_PX])
{
    c->aug_splits = splits;
    Loader *L;
    CtErr err;
    CHECKF(loader_create(&L, ds, c, &err) == 0, "%s", err.msg);
    CHECK(loader_start_epoch(L, 2, &err) == 0);
    const Batch *b;
    size_t k0 = 0;
    int S = splits ? splits : 1, rc;
    while ((rc = loader_next(L, &b, &err)) == 1) {
        CHECK(b->splits == S && k0 + (size_t)b->n <= SPLIT_N);
        for (int k = 0; k < S; k++)
            for (int j = 0; j < b->n && k0 + (size_t)j < SPLIT_N; j++) {
                size_t at = (size_t)k * b->n + j;
                CHECK(b->labels[at] == b->labels[j] && b->samples[at] == b->samples[j]);
                memcpy(out[k][k0 + j], b->images + at * SPLIT_PX, SPLIT_PX);
            }
        k0 += (size_t)b->n;
    }
    CHECKF(rc == 0 && k0 == SPLIT_N, "%d splits: %zu samples, %s", splits, k0, rc ? err.msg : "");
    loader_destroy(L);
}

/* aug_splits (timm's AugMixDataset + fast_collate): each batch holds split
 * k of its n samples at [k * n, (k + 1) * n), the short last batch too;
 * split 0 is the clean image, the same whatever the number of splits, and
 * split 1 is what the loader without splits gives. */
static void test_aug_splits(void)
{
    Dataset *ds = synthetic(SPLIT_N, 3, 40);
    TrainTransform tt = train_transform_default(16);
    tt.auto_augment = "augmix-m3-w2";
    tt.grayscale_prob = 0.5;
    LoaderConfig c = {.batch_size = 4, .num_workers = 2, .train = &tt, .seed = 3, .shuffle = 1, .world_size = 1};
    static uint8_t plain[1][SPLIT_N][SPLIT_PX], two[2][SPLIT_N][SPLIT_PX], three[3][SPLIT_N][SPLIT_PX];
    collect_splits(ds, &c, 0, plain);
    collect_splits(ds, &c, 2, two);
    collect_splits(ds, &c, 3, three);
    CHECKF(!memcmp(two[1], plain[0], sizeof plain[0]), "split 1 differs from the loader without splits");
    CHECKF(!memcmp(two[0], three[0], sizeof two[0]) && !memcmp(two[1], three[1], sizeof two[1]),
           "the first splits differ between 2 and 3 splits");
    int differ = 0;
    for (int j = 0; j < SPLIT_N; j++)
        differ += memcmp(three[1][j], three[2][j], SPLIT_PX) != 0;
    CHECKF(differ >= SPLIT_N - 1, "the two augmented splits agree %d/%d times", SPLIT_N - differ, SPLIT_N);
    c.train = NULL;
    EvalTransform et = eval_transform_default(16);
    c.eval = &et;
    c.aug_splits = 2;
    Loader *L;
    CtErr err;
    CHECK(loader_create(&L, ds, &c, &err) == -1 && strstr(err.msg, "aug_splits"));
    dataset_close(ds);
}

static void test_order(void)
{
    Dataset *ds = synthetic(53, 7, 16);
    LoaderConfig c = hash_config();
    c.shuffle = 0;
    c.num_workers = 2;
    Run r = run_epochs(ds, &c, 0, 1);
    CHECK(r.n == 53 && r.nbatches == 7 && r.sizes[6] == 5);
    for (size_t k = 0; k < r.n; k++)
        CHECK(r.samples[k] == (int64_t)k && r.labels[k] == (int64_t)(k % 7));
    run_free(&r);

    c.drop_last = 1;
    r = run_epochs(ds, &c, 0, 1);
    CHECK(r.n == 48 && r.nbatches == 6 && r.sizes[5] == 8);
    run_free(&r);

    /* shuffled: a permutation; the same for a seed, another for another seed */
    c.drop_last = 0;
    c.shuffle = 1;
    Run a = run_epochs(ds, &c, 4, 5);
    int seen[53] = {0};
    for (size_t k = 0; k < a.n; k++)
        seen[a.samples[k]]++;
    int perm = a.n == 53;
    for (int i = 0; i < 53; i++)
        perm &= seen[i] == 1;
    CHECK(perm);
    Run b = run_epochs(ds, &c, 4, 5);
    CHECK(same_run(&a, &b));
    run_free(&b);
    c.seed = 6;
    b = run_epochs(ds, &c, 4, 5);
    CHECK(!b.failed && memcmp(a.samples, b.samples, 53 * sizeof *a.samples) != 0);
    run_free(&b);
    run_free(&a);

    /* repeats: every index twice per epoch */
    c.repeats = 2;
    a = run_epochs(ds, &c, 0, 1);
    memset(seen, 0, sizeof seen);
    for (size_t k = 0; k < a.n; k++)
        seen[a.samples[k]]++;
    int twice = a.n == 106;
    for (int i = 0; i < 53; i++)
        twice &= seen[i] == 2;
    CHECK(twice);
    run_free(&a);

    /* fewer samples than a batch with drop_last: an empty epoch */
    Dataset *small = synthetic(5, 2, 16);
    c.repeats = 0;
    c.drop_last = 1;
    a = run_epochs(small, &c, 0, 1);
    CHECK(!a.failed && a.n == 0 && a.nbatches == 0);
    run_free(&a);
    dataset_close(small);
    dataset_close(ds);
}

static void test_sampler(void)
{
    Dataset *ds = synthetic(53, 7, 16);
    LoaderConfig c = hash_config();
    c.batch_size = 4;
    Run whole = run_epochs(ds, &c, 2, 3); /* world 1: positions 0..52 */
    c.world_size = 4;
    int count[53] = {0};
    size_t total = 0;
    size_t per = 4 * 4 * 3;
    for (int rank = 0; rank < 4; rank++) {
        c.rank = rank;
        c.num_workers = 1 + rank % 2;
        Run r = run_epochs(ds, &c, 2, 3);
        CHECKF(r.n == 14 && r.nbatches == 4 && r.sizes[3] == 2, "rank %d: %zu samples", rank, r.n);
        for (size_t k = 0; k < r.n; k++) {
            count[r.samples[k]]++;
            size_t p = (size_t)rank + 4 * k; /* the global position */
            size_t q = p % 53;               /* padding repeats the list from its start */
            CHECKF(r.samples[k] == whole.samples[q], "rank %d #%zu", rank, k);
            if (p < 53) /* same index and same position: the same image */
                CHECKF(!memcmp(r.images + k * per, whole.images + p * per, per), "rank %d #%zu image", rank, k);
        }
        total += r.n;
        run_free(&r);
    }
    int dup = 0, missing = 0;
    for (int i = 0; i < 53; i++) {
        dup += count[i] == 2;
        missing += count[i] == 0;
    }
    CHECK(total == 56 && dup == 3 && missing == 0);
    run_free(&whole);
    dataset_close(ds);
}

/* --aug-repeats: every rank's indices equal timm's RepeatAugSampler's for
 * the cases of tests/data/loader/repeat_aug.txt (tools/make_sampler_fixtures.py),
 * and a repeated image's copies, on different ranks, differ in their
 * augmentation draws. */
static void test_repeat_aug(void)
{
    const char *data = getenv("CTIMM_TEST_DATA");
    char path[512];
    snprintf(path, sizeof path, "%s/loader/repeat_aug.txt", data ? data : "tests/data");
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    static char line[16384];
    int cases = 0, same_pixels = 0, repeated = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n;
        int world, epoch, rank, used;
        double repeats;
        if (line[0] == '#' || sscanf(line, "%zu %d %lf %d %d:%n", &n, &world, &repeats, &epoch, &rank, &used) != 5)
            continue;
        size_t want[4096], nwant = 0;
        for (char *p = line + used; nwant < 4096 && sscanf(p, "%zu%n", &want[nwant], &used) == 1; p += used)
            nwant++;
        Dataset *ds = synthetic(n, 3, 16);
        LoaderConfig c = hash_config();
        c.batch_size = 4;
        c.world_size = world;
        c.rank = rank;
        c.aug_repeats = repeats;
        c.num_workers = 1 + rank % 2;
        Run r = run_epochs(ds, &c, epoch, epoch + 1);
        int ok = !r.failed && r.n == nwant;
        for (size_t k = 0; ok && k < nwant; k++)
            ok = (size_t)r.samples[k] == want[k];
        CHECKF(ok, "%zu samples, %d ranks, %g repeats, epoch %d, rank %d: %zu samples (timm's %zu) %s", n, world,
               repeats, epoch, rank, r.n, nwant, r.failed ? r.msg : "");
        /* the rank before held the same index at the same step k (repeats in a row, strided by rank) */
        if (rank > 0 && repeats == 3 && n == 53) {
            Run prev;
            c.rank = rank - 1;
            prev = run_epochs(ds, &c, epoch, epoch + 1);
            size_t per = 4 * 4 * 3;
            for (size_t k = 0; k < r.n && k < prev.n; k++) {
                if (prev.samples[k] != r.samples[k])
                    continue;
                repeated++;
                same_pixels += !memcmp(prev.images + k * per, r.images + k * per, per);
            }
            run_free(&prev);
        }
        run_free(&r);
        dataset_close(ds);
        cases++;
    }
    fclose(f);
    CHECKF(cases == 26, "%d repeat-aug cases", cases);
    CHECKF(repeated > 10 && same_pixels == 0, "%d repeated images, %d with the same draws", repeated, same_pixels);
}

/* ------------------------------------------------------------------ */
/* Bad images                                                          */
/* ------------------------------------------------------------------ */

typedef struct Warnings {
    int n;
    char msg[16][600];
} Warnings;

static void collect_warning(void *ctx, const char *msg)
{
    Warnings *w = ctx;
    if (w->n < 16)
        snprintf(w->msg[w->n], sizeof w->msg[0], "%s", msg);
    w->n++;
}

static void write_file(const char *rel, const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    for (char *p = path + strlen(tmpdir) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0777);
            *p = '/';
        }
    FILE *f = fopen(path, "wb");
    CHECKF(f && fwrite(data, 1, n, f) == n, "cannot write %s", path);
    if (f)
        fclose(f);
}

/* Writes a 16x16 JPEG of one colour. */
static void write_jpeg(const char *rel, int shade, size_t truncate_to)
{
    uint8_t rgb[16 * 16 * 3];
    for (int i = 0; i < 16 * 16 * 3; i++)
        rgb[i] = (uint8_t)(shade + i % 7);
    tjhandle tj = tjInitCompress();
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    CHECK(tjCompress2(tj, rgb, 16, 0, 16, TJPF_RGB, &jpeg, &len, TJSAMP_420, 90, 0) == 0);
    write_file(rel, jpeg, truncate_to && truncate_to < len ? truncate_to : len);
    tjFree(jpeg);
    tjDestroy(tj);
}

static void test_bad_images(void)
{
    /* a/0..5.jpg with 3 and 4 corrupt; b/0.jpg truncated */
    for (int i = 0; i < 6; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "bad/a/%d.jpg", i);
        if (i == 3)
            write_file(rel, "this is not an image", 20);
        else
            write_jpeg(rel, 20 * i, i == 4 ? 120 : 0);
    }
    write_jpeg("bad/b/0.jpg", 200, 0);
    write_file("bad/b/1.jpg", "\xFF\xD8\xFF", 3);
    write_jpeg("bad/b/2.jpg", 220, 0);
    char root[256];
    snprintf(root, sizeof root, "%s/bad", tmpdir);
    DatasetConfig dc = {.root = root};
    Dataset *ds;
    CtErr err;
    int rc = dataset_open(&ds, &dc, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc)
        return;
    EvalTransform et = eval_transform_default(8);
    Warnings w = {0};
    LoaderConfig c = {.batch_size = 4, .num_workers = 2, .eval = &et, .world_size = 1, .warn = collect_warning,
                      .warn_ctx = &w};
    Run r = run_epochs(ds, &c, 0, 2);
    CHECKF(!r.failed && r.n == 18, "%s", r.msg);
    /* order a/0 a/1 a/2 a/3 a/4 a/5 b/0 b/1 b/2: 3 and 4 become 5, b/1 becomes b/2 */
    static const int64_t want[9] = {0, 1, 2, 5, 5, 5, 6, 8, 8};
    for (int k = 0; k < 9 && (size_t)k < r.n; k++) {
        CHECKF(r.samples[k] == want[k] && r.samples[9 + k] == want[k], "sample %d from %lld", k, (long long)r.samples[k]);
        CHECK(r.labels[k] == (k < 6 ? 0 : 1));
    }
    /* one warning per bad file, over both epochs, naming it */
    CHECKF(w.n == 3, "%d warnings", w.n);
    const char *names[3] = {"/bad/a/3.jpg", "/bad/a/4.jpg", "/bad/b/1.jpg"};
    for (int f = 0; f < 3; f++) {
        int found = 0;
        for (int i = 0; i < w.n && i < 16; i++)
            found |= strstr(w.msg[i], names[f]) != NULL && strstr(w.msg[i], "skipped sample") != NULL;
        CHECKF(found, "no warning for %s", names[f]);
    }
    run_free(&r);

    /* two consecutive bad files and max_retries 2: the batch fails, naming where */
    w.n = 0;
    c.max_retries = 2;
    r = run_epochs(ds, &c, 0, 1);
    CHECKF(r.failed && strstr(r.msg, "2 consecutive samples failed") && strstr(r.msg, "/bad/a/3.jpg") &&
               strstr(r.msg, "batch 0"),
           "%s", r.failed ? r.msg : "no error");
    CHECK(r.n == 0);
    run_free(&r);
    dataset_close(ds);

    /* through a tar: cat/1bad.jpg is truncated */
    const char *data = getenv("CTIMM_TEST_DATA");
    char tar[512];
    snprintf(tar, sizeof tar, "%s/loader/photos.tar", data ? data : "tests/data");
    dc.root = tar;
    rc = dataset_open(&ds, &dc, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc)
        return;
    w.n = 0;
    c.max_retries = 0;
    c.batch_size = 3;
    r = run_epochs(ds, &c, 0, 1);
    CHECKF(!r.failed && r.n == 7, "%s", r.msg);
    CHECK(r.n == 7 && r.samples[1] == 2 && r.labels[4] == 1);
    CHECKF(w.n == 1 && strstr(w.msg[0], "photos.tar:cat/1bad.jpg"), "%d warnings: %s", w.n, w.msg[0]);
    run_free(&r);
    dataset_close(ds);
}

/* ------------------------------------------------------------------ */
/* Lifecycle and errors                                                */
/* ------------------------------------------------------------------ */

static int allocs, frees;
static void *count_alloc(void *ctx, size_t n)
{
    allocs++;
    return malloc(n);
}
static void count_free(void *ctx, void *p)
{
    frees++;
    free(p);
}

static void test_lifecycle(void)
{
    Dataset *ds = synthetic(40, 4, 16);
    LoaderConfig c = hash_config();
    c.num_workers = 3;
    c.alloc = count_alloc;
    c.free = count_free;
    c.queue_depth = 2;
    Loader *L;
    CtErr err;
    const Batch *b;
    CHECK(loader_create(&L, ds, &c, &err) == 0);
    CHECK(allocs == 2);
    CHECK(loader_next(L, &b, &err) == -1 && strstr(err.msg, "loader_start_epoch"));
    /* abandon epoch 0 after one batch; epoch 1 must equal a fresh run of epoch 1 */
    CHECK(loader_start_epoch(L, 0, &err) == 0);
    CHECK(loader_next(L, &b, &err) == 1 && b->index == 0);
    CHECK(loader_start_epoch(L, 1, &err) == 0);
    Run r = {0};
    int rc;
    while ((rc = loader_next(L, &b, &err)) == 1)
        run_add(&r, b);
    CHECK(rc == 0);
    Run fresh = run_epochs(ds, &c, 1, 2);
    CHECK(same_run(&r, &fresh));
    run_free(&r);
    run_free(&fresh);
    /* stop in the middle of an epoch, workers busy */
    CHECK(loader_start_epoch(L, 2, &err) == 0);
    CHECK(loader_next(L, &b, &err) == 1);
    loader_destroy(L);
    CHECK(allocs == frees);
    /* destroy right after create, and right after start */
    CHECK(loader_create(&L, ds, &c, &err) == 0);
    loader_destroy(L);
    CHECK(loader_create(&L, ds, &c, &err) == 0);
    CHECK(loader_start_epoch(L, 0, &err) == 0);
    loader_destroy(L);
    CHECK(allocs == frees);

    /* configuration errors */
    LoaderConfig bad = hash_config();
    bad.batch_size = 0;
    CHECK(loader_create(&L, ds, &bad, &err) == -1 && strstr(err.msg, "batch size"));
    bad = hash_config();
    bad.rank = 2;
    bad.world_size = 2;
    CHECK(loader_create(&L, ds, &bad, &err) == -1 && strstr(err.msg, "rank 2"));
    bad = hash_config();
    EvalTransform et = eval_transform_default(8);
    bad.eval = &et;
    CHECK(loader_create(&L, ds, &bad, &err) == -1 && strstr(err.msg, "exactly one"));
    bad = hash_config();
    bad.num_workers = 0;
    CHECK(loader_create(&L, ds, &bad, &err) == -1 && strstr(err.msg, "workers"));
    dataset_close(ds);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ctimm_test_loader_%ld", (long)getpid());
    if (mkdir(tmpdir, 0777) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    test_worker_counts();
    test_start_at();
    test_real_transforms();
    test_aug_splits();
    test_order();
    test_sampler();
    test_repeat_aug();
    test_bad_images();
    test_lifecycle();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done("test_loader");
}
