/*
 * WebDataset shards (runtime/data/wds.h, dataset.h's CT_DS_WDS): the
 * buffered shuffle, brace expansion, timm's per-worker epoch length, the
 * epoch order's split over ranks and workers (every sample once when the
 * shards divide evenly, each worker's batches from its own shards only),
 * and a shard folder written here (ustar) indexed and read through the
 * loader: _info.json splits, a shard pattern with "|N", .cls and .json
 * labels, skipped key groups, refusals. tests/data/wds (made by
 * tools/make_wds_fixture.py with timm's ReaderWds): the samples, labels and
 * chosen images timm reads from webdataset-grouped shards, the exact order
 * of evaluation epochs over ranks and workers, and training epoch lengths.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/data/wds.h"
#include "tests/check.h"

static char tmpdir[64];

static void test_shuffle(void)
{
    enum { N = 200 };
    size_t in[N], out[N], again[N];
    for (size_t i = 0; i < N; i++)
        in[i] = i;
    size_t bufs[][2] = {{8192, 2048}, {10, 4}, {1, 1}, {50, 100}};
    for (size_t c = 0; c < sizeof bufs / sizeof *bufs; c++) {
        size_t bs = bufs[c][0], init = bufs[c][1] < bs ? bufs[c][1] : bs;
        CtRng r = rng_for(7, 1, c);
        wds_shuffle(in, N, bs, init, &r, out);
        int seen[N] = {0}, moved = 0;
        for (size_t i = 0; i < N; i++) {
            CHECKF(out[i] < N && !seen[out[i]], "case %zu: %zu repeated or out of range", c, out[i]);
            if (out[i] < N)
                seen[out[i]] = 1;
            moved += out[i] != i;
            /* a sample leaves the buffer at most bufsize + 1 items after it was read */
            CHECKF(out[i] <= i + bs + 1, "case %zu: output %zu is input %zu, past the buffer of %zu", c, i, out[i],
                   bs);
        }
        CHECKF(bs == 1 ? moved == 0 : moved > N / 2, "case %zu: %d of %d moved", c, moved, N);
        r = rng_for(7, 1, c);
        wds_shuffle(in, N, bs, init, &r, again);
        CHECK(!memcmp(out, again, sizeof out));
    }
    /* the first output comes from the first `initial` (+1: items enter two at a time) */
    for (uint64_t s = 0; s < 50; s++) {
        CtRng r = rng_for(s, 0, 0);
        wds_shuffle(in, N, 100, 6, &r, out);
        CHECKF(out[0] < 7, "seed %llu: first out %zu", (unsigned long long)s, out[0]);
    }
}

static void check_expand(const char *pat, const char *const *want, size_t nwant)
{
    char **v;
    size_t n;
    CtErr err;
    if (wds_expand(pat, &v, &n, &err)) {
        CHECKF(0, "%s: %s", pat, err.msg);
        return;
    }
    CHECKF(n == nwant, "%s: %zu names, want %zu", pat, n, nwant);
    for (size_t i = 0; i < n && i < nwant; i++)
        CHECKF(!strcmp(v[i], want[i]), "%s: [%zu] %s, want %s", pat, i, v[i], want[i]);
    wds_free_names(v, n);
}

static void test_expand(void)
{
    /* braceexpand's: python3 -c "import braceexpand; print(list(braceexpand.braceexpand(P)))" */
    const char *const a[] = {"s-000008.tar", "s-000009.tar", "s-000010.tar"};
    check_expand("s-{000008..000010}.tar", a, 3);
    const char *const b[] = {"a-1.tar", "a-2.tar", "b-1.tar", "b-2.tar"};
    check_expand("{a,b}-{1..2}.tar", b, 4);
    const char *const c[] = {"x.tar", "y-08.tar", "y-09.tar", "y-10.tar"};
    check_expand("x.tar::y-{08..10}.tar", c, 4);
    const char *const d[] = {"d/9", "d/10"};
    check_expand("d/{9..10}", d, 2);
    const char *bad[] = {"s-{1..}.tar", "s-{3..1}.tar", "s-{1..2.tar", "::"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char **v;
        size_t n;
        CtErr err;
        CHECKF(wds_expand(bad[i], &v, &n, &err) != 0, "%s accepted", bad[i]);
    }
}

static void test_worker_samples(void)
{
    /* timm's ReaderWds._num_samples_per_worker on these (num_samples, ranks,
     * workers per rank, batch, is_training), e.g.
     * ReaderWds._num_samples_per_worker(SimpleNamespace(num_samples=60,
     * dist_num_replicas=2, global_num_workers=4, batch_size=4, is_training=True)) */
    static const struct { size_t n; int w, nw, b, train; size_t want; } c[] = {
        {60, 2, 1, 5, 1, 30}, {60, 2, 2, 5, 1, 15}, {60, 2, 2, 4, 1, 16}, {61, 1, 1, 8, 0, 61},
        {61, 2, 1, 8, 0, 31}, {10, 1, 4, 3, 0, 2},  {7, 2, 3, 2, 1, 2},   {100, 4, 1, 3, 0, 25},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        CHECKF(wds_worker_samples(c[i].n, c[i].w, c[i].nw, c[i].b, c[i].train) == c[i].want, "case %zu: %zu, want %zu",
               i, wds_worker_samples(c[i].n, c[i].w, c[i].nw, c[i].b, c[i].train), c[i].want);
}

enum { SHARDS = 10, PER = 6, TOTAL = SHARDS * PER };

static size_t shard_of(size_t i) { return i / PER; }

static void test_epoch_order(void)
{
    size_t first[SHARDS + 1];
    for (size_t s = 0; s <= SHARDS; s++)
        first[s] = s * PER;
    CtErr err;
    /* 2 ranks x 1 worker, batch 5: each rank 30 = its 5 shards, every sample once an epoch */
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        int count[TOTAL] = {0};
        size_t order[2][30];
        for (int r = 0; r < 2; r++) {
            WdsPlan p = {SHARDS, first, TOTAL, 1, 42, r, 2, 1, 5};
            CHECK(wds_rank_samples(&p) == 30);
            CHECKF(wds_epoch_order(&p, epoch, order[r], &err) == 0, "%s", err.msg);
            for (size_t k = 0; k < 30; k++)
                count[order[r][k]]++;
            size_t again[30];
            wds_epoch_order(&p, epoch, again, &err);
            CHECK(!memcmp(again, order[r], sizeof again));
        }
        for (size_t i = 0; i < TOTAL; i++)
            CHECKF(count[i] == 1, "epoch %llu: sample %zu seen %d times", (unsigned long long)epoch, i, count[i]);
        /* shards were shuffled: rank 0 does not hold shards 0, 2, 4, 6, 8 in order in every epoch */
        static size_t prev[30];
        if (epoch)
            CHECK(memcmp(prev, order[0], sizeof prev) != 0);
        memcpy(prev, order[0], sizeof prev);
    }
    /* 2 ranks x 2 workers, batch 5: a worker reads 2 or 3 shards, cut or repeated to 15; the rank's
     * batches alternate between its workers, whose shards differ */
    for (int r = 0; r < 2; r++) {
        WdsPlan p = {SHARDS, first, TOTAL, 1, 42, r, 2, 2, 5};
        size_t order[30];
        CHECK(wds_rank_samples(&p) == 30);
        CHECKF(wds_epoch_order(&p, 0, order, &err) == 0, "%s", err.msg);
        int shards_of[2][SHARDS] = {{0}};
        for (size_t k = 0; k < 30; k++)
            shards_of[(k / 5) % 2][shard_of(order[k])] = 1;
        int n0 = 0, n1 = 0;
        for (size_t s = 0; s < SHARDS; s++) {
            CHECKF(!(shards_of[0][s] && shards_of[1][s]), "rank %d: shard %zu read by both workers", r, s);
            n0 += shards_of[0][s];
            n1 += shards_of[1][s];
        }
        CHECKF(n0 >= 2 && n0 <= 3 && n1 >= 2 && n1 <= 3, "rank %d: workers read %d and %d shards", r, n0, n1);
    }
    /* single-rank evaluation, 3 workers: every sample once, each worker's shards in order, batches in turn */
    {
        WdsPlan p = {SHARDS, first, 0, 0, 42, 0, 1, 3, 4};
        CHECK(wds_rank_samples(&p) == TOTAL);
        size_t order[TOTAL];
        CHECKF(wds_epoch_order(&p, 0, order, &err) == 0, "%s", err.msg);
        /* worker 0: shards 0, 3, 6, 9; worker 1: 1, 4, 7; worker 2: 2, 5, 8 -> first batches 0..3, 6..9, 12..15 */
        CHECK(order[0] == 0 && order[3] == 3 && order[4] == 6 && order[8] == 12 && order[12] == 4);
        int count[TOTAL] = {0};
        for (size_t k = 0; k < TOTAL; k++)
            count[order[k]]++;
        for (size_t i = 0; i < TOTAL; i++)
            CHECKF(count[i] == 1, "eval: sample %zu seen %d times", i, count[i]);
    }
    /* more workers than shards, a training split of unknown size: refused */
    WdsPlan many = {SHARDS, first, TOTAL, 1, 42, 0, 4, 3, 5};
    CHECK(wds_plan_check(&many, &err) != 0 && strstr(err.msg, "10 shards for 12 loader workers"));
    WdsPlan unknown = {SHARDS, first, 0, 1, 42, 0, 1, 1, 5};
    CHECK(wds_plan_check(&unknown, &err) != 0 && strstr(err.msg, "--train-num-samples"));
}

/* ---- a shard folder, written as ustar ---- */

static void tar_member(FILE *f, const char *name, const void *data, size_t n)
{
    unsigned char h[512] = {0};
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)n);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    fwrite(h, 1, 512, f);
    fwrite(data, 1, n, f);
    static const unsigned char zero[512];
    fwrite(zero, 1, (512 - n % 512) % 512, f);
}

static FILE *open_shard(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CHECKF(f != NULL, "cannot write %s", path);
    return f;
}

static void close_shard(FILE *f)
{
    static const unsigned char zero[1024];
    fwrite(zero, 1, sizeof zero, f);
    fclose(f);
}

static void put_file(const char *name, const char *text)
{
    FILE *f = open_shard(name);
    fputs(text, f);
    fclose(f);
}

/* Shards train-00000{0..3}.tar: 5 samples each, "img" bytes "<shard>:<k>", label (shard * 5 + k) % 7. */
static void write_train(void)
{
    for (int s = 0; s < 4; s++) {
        char name[64];
        snprintf(name, sizeof name, "train-%06d.tar", s);
        FILE *f = open_shard(name);
        for (int k = 0; k < 5; k++) {
            char key[64], data[32], cls[16];
            snprintf(data, sizeof data, "%d:%d", s, k);
            snprintf(cls, sizeof cls, "%d\n", (s * 5 + k) % 7);
            snprintf(key, sizeof key, "s%02d_%d.cls", s, k); /* before the image: order within a key is free */
            tar_member(f, key, cls, strlen(cls));
            snprintf(key, sizeof key, "s%02d_%d.jpg", s, k);
            tar_member(f, key, data, strlen(data));
        }
        /* a key with no image and one with no label: left out, as timm's pipeline skips them */
        tar_member(f, "orphan.cls", "1", 1);
        tar_member(f, "nolabel.jpg", "x", 1);
        tar_member(f, "__meta__.txt", "m", 1);
        close_shard(f);
    }
    /* a json-labelled split: the label field from the info's alt_label; -1 leaves the sample out */
    FILE *f = open_shard("val-000000.tar");
    const char *js[] = {"{\"meta\": {\"y\": 3}}", "{\"meta\": {\"y\": 5}}", "{\"meta\": {\"y\": -1}}"};
    for (int k = 0; k < 3; k++) {
        char key[64];
        snprintf(key, sizeof key, "v%d.json", k);
        tar_member(f, key, js[k], strlen(js[k]));
        snprintf(key, sizeof key, "v%d.png", k);
        tar_member(f, key, "png", 3);
    }
    close_shard(f);
    put_file("_info.json",
             "{\"name\": \"t\", \"splits\": {"
             "\"train\": {\"name\": \"train\", \"num_samples\": 20, \"filenames\": [\"train-000000.tar\", "
             "\"train-000001.tar\", \"train-000002.tar\", \"train-000003.tar\"], \"shard_lengths\": [5, 5, 5, 5]},"
             "\"val\": {\"name\": \"val\", \"num_samples\": 2, \"filenames\": [\"val-000000.tar\"], "
             "\"shard_lengths\": [2], \"alt_label\": \"meta/y\"},"
             "\"s\": {\"name\": \"s\", \"num_samples\": 99, \"filenames\": [\"w-0-s\", \"w-1-s\", \"w-2-s\"], "
             "\"shard_lengths\": [5, 5, 5]}}}");
    for (int s = 0; s < 3; s++) {
        char from[128], to[128];
        snprintf(from, sizeof from, "train-%06d.tar", s);
        snprintf(to, sizeof to, "%s/w-%d-s", tmpdir, s);
        CHECK(symlink(from, to) == 0);
    }
}

static int copy_id(void *ctx, const uint8_t *data, size_t n, CtRng *rng, uint8_t *out, CtErr *err)
{
    (void)ctx, (void)rng, (void)err;
    memset(out, 0, 8 * 8 * 3);
    memcpy(out, data, n < 16 ? n : 16);
    return 0;
}

static void test_dataset(void)
{
    write_train();
    CtErr err;
    Dataset *ds = NULL;
    DatasetConfig dc = {.kind = CT_DS_WDS, .root = tmpdir, .split = "train"};
    if (dataset_open(&ds, &dc, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    CHECK(dataset_len(ds) == 20);
    CHECK(dataset_num_classes(ds) == 7);
    size_t ns, num;
    const size_t *first;
    CHECK(dataset_wds_shards(ds, &ns, &first, &num) == 0 && ns == 4 && num == 20 && first[1] == 5 && first[4] == 20);
    char name[512];
    dataset_sample_name(ds, 7, name, sizeof name);
    CHECKF(strstr(name, "train-000001.tar:s01_2") != NULL, "%s", name);
    CHECK(dataset_label(ds, 7) == 0);
    DatasetReader *r;
    CHECK(dataset_reader_open(&r, ds, &err) == 0);
    const uint8_t *d;
    size_t n;
    CHECK(dataset_read(r, 13, &d, &n, &err) == 0 && n == 3 && !memcmp(d, "2:3", 3));
    CHECK(dataset_read(r, 2, &d, &n, &err) == 0 && n == 3 && !memcmp(d, "0:2", 3));
    dataset_reader_close(r);

    /* two ranks' loaders, batch 5, one worker: 10 samples each, the 20 once between them */
    int count[20] = {0};
    for (int rank = 0; rank < 2; rank++) {
        LoaderConfig lc = {.batch_size = 5, .num_workers = 1, .sample_fn = copy_id, .img_size = 8, .seed = 1,
                           .shuffle = 1, .drop_last = 1, .rank = rank, .world_size = 2};
        Loader *L;
        if (loader_create(&L, ds, &lc, &err)) {
            CHECKF(0, "%s", err.msg);
            continue;
        }
        CHECK(loader_epoch_batches(L) == 2);
        CHECK(loader_start_epoch(L, 3, &err) == 0);
        const Batch *b;
        while (loader_next(L, &b, &err) == 1)
            for (int j = 0; j < b->n; j++) {
                size_t i = (size_t)b->samples[j];
                count[i]++;
                char want[32];
                snprintf(want, sizeof want, "%zu:%zu", i / 5, i % 5);
                CHECKF(!memcmp(b->images + (size_t)j * 8 * 8 * 3, want, strlen(want)), "sample %zu's bytes", i);
                CHECK(b->labels[j] == (int64_t)(i % 7));
            }
        loader_destroy(L);
    }
    for (int i = 0; i < 20; i++)
        CHECKF(count[i] == 1, "sample %d seen %d times", i, count[i]);
    /* 3 workers a rank on 4 shards: refused (a worker would have none) */
    LoaderConfig lc = {.batch_size = 5, .num_workers = 3, .sample_fn = copy_id, .img_size = 8, .shuffle = 1,
                       .drop_last = 1, .rank = 0, .world_size = 2};
    Loader *L = NULL;
    CHECK(loader_create(&L, ds, &lc, &err) != 0 && strstr(err.msg, "4 shards for 6 loader workers"));
    dataset_close(ds);

    /* a shard pattern: "|N" gives the count, no info needed for the shards */
    dc.split = "train-{000001..000002}.tar|9";
    CHECKF(dataset_open(&ds, &dc, &err) == 0, "%s", err.msg);
    if (ds) {
        CHECK(dataset_len(ds) == 10 && dataset_wds_shards(ds, &ns, &first, &num) == 0 && ns == 2 && num == 9);
        dataset_close(ds);
        ds = NULL;
    }
    /* a pattern whose last '-' part names a split: timm's _parse_split_info reads all that split's shards,
     * counting the pattern's (or taking the split's num_samples when "|N" is given) */
    dc.split = "w-{0..1}-s";
    CHECKF(dataset_open(&ds, &dc, &err) == 0, "%s", err.msg);
    if (ds) {
        CHECK(dataset_len(ds) == 15 && dataset_wds_shards(ds, &ns, &first, &num) == 0 && ns == 3 && num == 10);
        dataset_close(ds);
        ds = NULL;
    }
    dc.split = "w-{0..1}-s|7";
    CHECKF(dataset_open(&ds, &dc, &err) == 0, "%s", err.msg);
    if (ds) {
        CHECK(dataset_wds_shards(ds, &ns, &first, &num) == 0 && ns == 3 && num == 99);
        dataset_close(ds);
        ds = NULL;
    }
    /* --train-num-samples overrides the info's count */
    dc.split = "train";
    dc.num_samples = 12;
    CHECKF(dataset_open(&ds, &dc, &err) == 0, "%s", err.msg);
    if (ds) {
        CHECK(dataset_wds_shards(ds, &ns, &first, &num) == 0 && num == 12);
        dataset_close(ds);
        ds = NULL;
    }
    dc.num_samples = 0;
    /* json labels through the split's alt_label, a '/' path into nested objects; -1 left out */
    dc.split = "val";
    CHECKF(dataset_open(&ds, &dc, &err) == 0, "%s", err.msg);
    if (ds) {
        CHECK(dataset_len(ds) == 2 && dataset_label(ds, 0) == 3 && dataset_label(ds, 1) == 5);
        dataset_close(ds);
        ds = NULL;
    }
    /* refusals: no such split (no synonyms, as timm), a class map */
    dc.split = "validation";
    CHECK(dataset_open(&ds, &dc, &err) != 0 && strstr(err.msg, "split 'validation' not found (its splits: train, val, s)"));
    dc.split = "train";
    dc.class_map = "classes.txt";
    CHECK(dataset_open(&ds, &dc, &err) != 0 && strstr(err.msg, "a .txt names classes, which no wds label matches"));
    /* pickle.dumps({2: 0, 5: 1, 6: 2}, protocol=4): label 0 is not in it (timm's KeyError) */
    static const char pkl[] = "\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x4b\x02\x4b\x00\x4b\x05"
                              "\x4b\x01\x4b\x06\x4b\x02\x75\x2e";
    char map[128];
    snprintf(map, sizeof map, "%s/map.pkl", tmpdir);
    FILE *f = fopen(map, "wb");
    CHECK(f && fwrite(pkl, 1, sizeof pkl - 1, f) == sizeof pkl - 1);
    if (f)
        fclose(f);
    dc.class_map = map;
    CHECKF(dataset_open(&ds, &dc, &err) != 0 && strstr(err.msg, "train-000000.tar:s00_0: label 0 is not in class map"),
           "%s", err.msg);
}

/* The keys of one rank's epoch as the loader hands them out. */
static int loader_keys(const Dataset *ds, int world, int rank, int workers, int batch, int training, char ***keys,
                       size_t *n)
{
    LoaderConfig lc = {.batch_size = batch, .num_workers = workers, .sample_fn = copy_id, .img_size = 8,
                       .shuffle = training, .drop_last = training, .rank = rank, .world_size = world};
    Loader *L;
    CtErr err;
    if (loader_create(&L, ds, &lc, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    *n = loader_epoch_samples(L);
    *keys = calloc(*n + 1, sizeof **keys);
    size_t k = 0;
    const Batch *b;
    CHECK(loader_start_epoch(L, 0, &err) == 0);
    while (loader_next(L, &b, &err) == 1)
        for (int j = 0; j < b->n && k < *n; j++) {
            char name[512];
            dataset_sample_name(ds, (size_t)b->samples[j], name, sizeof name);
            const char *colon = strrchr(name, ':');
            (*keys)[k++] = strdup(colon ? colon + 1 : name);
        }
    CHECK(k == *n);
    loader_destroy(L);
    return 0;
}

/* Compares ds, sample by sample, with rows [key, label, image extension]
 * (from column `from` of each row): timm's keys, labels and chosen images. */
static void check_listing(const char *what, const Dataset *ds, const cJSON *rows, int from)
{
    CtErr err;
    DatasetReader *rd = NULL;
    if (!ds || dataset_reader_open(&rd, ds, &err)) {
        CHECKF(0, "%s: no dataset", what);
        return;
    }
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, rows)
    {
        const char *key = cJSON_GetArrayItem(e, from)->valuestring, *ext = cJSON_GetArrayItem(e, from + 2)->valuestring;
        int label = cJSON_GetArrayItem(e, from + 1)->valueint;
        if (i >= dataset_len(ds)) {
            CHECKF(0, "%s: %s missing", what, key);
            continue;
        }
        char name[512];
        dataset_sample_name(ds, i, name, sizeof name);
        const char *colon = strrchr(name, ':');
        CHECKF(colon && !strcmp(colon + 1, key), "%s sample %zu: %s, timm's %s", what, i, name, key);
        CHECKF(dataset_label(ds, i) == label, "%s: %s: label %lld, timm's %d", what, key,
               (long long)dataset_label(ds, i), label);
        const uint8_t *d;
        size_t n;
        CHECK(dataset_read(rd, i, &d, &n, &err) == 0 && n > 4);
        int is_jpg = d[0] == 0xFF && d[1] == 0xD8, is_png = d[0] == 0x89 && d[1] == 'P';
        CHECKF(!strcmp(ext, "jpg") ? is_jpg : is_png, "%s: %s: not the %s timm reads", what, key, ext);
        i++;
    }
    CHECKF(i == dataset_len(ds), "%s: %zu samples, timm's %zu", what, dataset_len(ds), i);
    dataset_reader_close(rd);
}

static void test_timm_fixture(void)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/wds", test_data_dir());
    snprintf(path, sizeof path, "%s/expected.json", dir);
    FILE *f = fopen(path, "rb");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    cJSON *j = cJSON_Parse(text);
    CHECK(j != NULL);
    CtErr err;
    /* the samples of each split: key, label, the image chosen (jpg before png) */
    const char *splits[] = {"train", "jval"};
    Dataset *ds[2] = {NULL, NULL};
    for (int s = 0; s < 2; s++) {
        DatasetConfig dc = {.kind = CT_DS_WDS, .root = dir, .split = splits[s]};
        CHECKF(dataset_open(&ds[s], &dc, &err) == 0, "%s", err.msg);
        cJSON *rows = cJSON_CreateArray();
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "samples"))
            if (!strcmp(cJSON_GetArrayItem(e, 0)->valuestring, splits[s]))
                cJSON_AddItemReferenceToArray(rows, (cJSON *)e);
        check_listing(splits[s], ds[s], rows, 1);
        cJSON_Delete(rows);
    }
    /* --input-key png;jpg (png preferred), --target-key z over the split's alt_label */
    const cJSON *keyed = cJSON_GetObjectItem(j, "keyed");
    Dataset *kd = NULL;
    DatasetConfig kc = {.kind = CT_DS_WDS, .root = dir, .split = "train", .input_key = "png;jpg"};
    CHECKF(dataset_open(&kd, &kc, &err) == 0, "%s", err.msg);
    check_listing("train, input key png;jpg", kd, cJSON_GetObjectItem(keyed, "train png;jpg"), 0);
    dataset_close(kd);
    kd = NULL;
    kc = (DatasetConfig){.kind = CT_DS_WDS, .root = dir, .split = "jval", .target_key = "z"};
    CHECKF(dataset_open(&kd, &kc, &err) == 0, "%s", err.msg);
    check_listing("jval, target key z", kd, cJSON_GetObjectItem(keyed, "jval target z"), 0);
    dataset_close(kd);
    const cJSON *e;
    /* evaluation epochs: timm's exact sequence a rank */
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "orders"))
    {
        int world = cJSON_GetObjectItem(e, "world")->valueint, rank = cJSON_GetObjectItem(e, "rank")->valueint;
        int workers = cJSON_GetObjectItem(e, "workers")->valueint, batch = cJSON_GetObjectItem(e, "batch")->valueint;
        const cJSON *want = cJSON_GetObjectItem(e, "keys");
        char **keys = NULL;
        size_t n = 0;
        if (!ds[0] || loader_keys(ds[0], world, rank, workers, batch, 0, &keys, &n))
            continue;
        CHECKF(n == (size_t)cJSON_GetArraySize(want), "%d ranks, rank %d, %d workers, batch %d: %zu samples, timm's %d",
               world, rank, workers, batch, n, cJSON_GetArraySize(want));
        for (size_t k = 0; k < n && k < (size_t)cJSON_GetArraySize(want); k++)
            CHECKF(keys[k] && !strcmp(keys[k], cJSON_GetArrayItem(want, (int)k)->valuestring),
                   "%d ranks, rank %d, %d workers, batch %d: [%zu] %s, timm's %s", world, rank, workers, batch, k,
                   keys[k], cJSON_GetArrayItem(want, (int)k)->valuestring);
        for (size_t k = 0; k < n; k++)
            free(keys[k]);
        free(keys);
    }
    /* training epochs: timm's length */
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "lengths"))
    {
        int world = cJSON_GetObjectItem(e, "world")->valueint, workers = cJSON_GetObjectItem(e, "workers")->valueint;
        int batch = cJSON_GetObjectItem(e, "batch")->valueint;
        size_t n = 0, want = (size_t)cJSON_GetObjectItem(e, "len")->valueint;
        char **keys = NULL;
        if (!ds[0] || loader_keys(ds[0], world, 0, workers, batch, 1, &keys, &n))
            continue;
        CHECKF(n == want, "training, %d ranks, %d workers, batch %d: %zu samples, timm's %zu", world, workers, batch,
               n, want);
        for (size_t k = 0; k < n; k++)
            free(keys[k]);
        free(keys);
    }
    /* the train split through class map map.pkl (label numbers to indices): timm's keys and labels */
    char map[600];
    snprintf(map, sizeof map, "%s/map.pkl", dir);
    DatasetConfig dc = {.kind = CT_DS_WDS, .root = dir, .split = "train", .class_map = map};
    Dataset *mapped = NULL;
    CHECKF(dataset_open(&mapped, &dc, &err) == 0, "%s", err.msg);
    const cJSON *want = cJSON_GetObjectItem(j, "mapped");
    CHECK(mapped && dataset_len(mapped) == (size_t)cJSON_GetArraySize(want));
    for (size_t i = 0; mapped && i < dataset_len(mapped) && i < (size_t)cJSON_GetArraySize(want); i++) {
        const cJSON *w = cJSON_GetArrayItem(want, (int)i);
        char name[512];
        dataset_sample_name(mapped, i, name, sizeof name);
        const char *colon = strrchr(name, ':');
        CHECKF(colon && !strcmp(colon + 1, cJSON_GetArrayItem(w, 0)->valuestring) &&
                   dataset_label(mapped, i) == cJSON_GetArrayItem(w, 1)->valueint,
               "mapped sample %zu: %s label %lld, timm's %s %d", i, name, (long long)dataset_label(mapped, i),
               cJSON_GetArrayItem(w, 0)->valuestring, cJSON_GetArrayItem(w, 1)->valueint);
    }
    dataset_close(mapped);
    for (int s = 0; s < 2; s++)
        dataset_close(ds[s]);
    cJSON_Delete(j);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ctimm_wds_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_shuffle();
    test_expand();
    test_worker_samples();
    test_epoch_order();
    test_dataset();
    test_timm_fixture();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done("test_wds");
}
