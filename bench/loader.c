/*
 * bench_loader: images per second of ctimm's data loader over an image
 * folder, for timm's default train pipeline (RandomResizedCrop 224, hflip
 * 0.5, colour jitter 0.4, bilinear) and eval pipeline (resize 256 + centre
 * crop 224), at each thread count asked for. The numbers to put beside
 * bench/loader_timm.py's (bench/run_loader.sh does both).
 *
 * Each (pipeline, threads) runs one untimed epoch (page cache, allocator),
 * then --epochs timed ones; the median epoch gives images/s. Train drops
 * the last short batch, like timm's loader.
 *
 * --breakdown also times the stages on one thread, per image: reading the
 * bytes, probing, a full-size decode, the train and eval transforms, so the
 * notes can say where the time goes.
 *
 * Output: one line per measurement, "ctimm <pipeline> threads=<t> images=<n>
 * median_s=<s> ... img_per_s=<r> cpu_s_per_img=<c>ms", which run_loader.sh
 * parses; cpu is the process's CPU time over the timed epochs, all threads,
 * which a busy machine disturbs less than the wall clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "runtime/data/dataset.h"
#include "runtime/data/image.h"
#include "runtime/data/loader.h"
#include "runtime/data/transforms.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) of the whole process, all threads. */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(const Dataset *ds, int train, int threads, int batch, int epochs, int img)
{
    TrainTransform tt = train_transform_default(img);
    EvalTransform et = eval_transform_default(img);
    LoaderConfig c = {.batch_size = batch, .num_workers = threads, .seed = 42, .shuffle = train,
                      .drop_last = train, .world_size = 1};
    if (train)
        c.train = &tt;
    else
        c.eval = &et;
    Loader *L;
    CtErr err;
    if (loader_create(&L, ds, &c, &err)) {
        fprintf(stderr, "bench_loader: %s\n", err.msg);
        return -1;
    }
    double times[64], cpu = 0;
    size_t images = 0;
    int rc = 0;
    for (int e = 0; e <= epochs && rc == 0; e++) {
        double t0 = now(), c0 = cpu_now();
        size_t n = 0;
        const Batch *b;
        if (loader_start_epoch(L, (uint64_t)e, &err)) {
            rc = -1;
            break;
        }
        while ((rc = loader_next(L, &b, &err)) == 1)
            n += (size_t)b->n;
        if (rc < 0)
            break;
        if (e > 0) {
            times[e - 1] = now() - t0;
            cpu += cpu_now() - c0;
        }
        images = n;
    }
    loader_destroy(L);
    if (rc < 0) {
        fprintf(stderr, "bench_loader: %s\n", err.msg);
        return -1;
    }
    qsort(times, (size_t)epochs, sizeof *times, cmp_double);
    double med = times[epochs / 2];
    printf("ctimm %s threads=%d images=%zu median_s=%.4f min_s=%.4f max_s=%.4f img_per_s=%.1f cpu_s_per_img=%.3fms\n",
           train ? "train" : "eval", threads, images, med, times[0], times[epochs - 1], images / med,
           cpu / ((double)images * epochs) * 1e3);
    fflush(stdout);
    return 0;
}

/* Single-thread cost of each stage, per image, over the whole dataset. */
static int breakdown(const Dataset *ds, int img)
{
    DatasetReader *r;
    CtErr err;
    if (dataset_reader_open(&r, ds, &err)) {
        fprintf(stderr, "bench_loader: %s\n", err.msg);
        return -1;
    }
    size_t n = dataset_len(ds);
    uint8_t *out = malloc((size_t)img * img * 3);
    TrainTransform tt = train_transform_default(img);
    EvalTransform et = eval_transform_default(img);
    double t_read = 0, t_probe = 0, t_dec = 0, t_train = 0, t_eval = 0, bytes = 0, pixels = 0;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms the page cache */
        t_read = t_probe = t_dec = t_train = t_eval = bytes = pixels = 0;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *data;
            size_t len;
            double t0 = now();
            if (dataset_read(r, i, &data, &len, &err))
                goto fail;
            double t1 = now();
            int w, h;
            if (image_probe(data, len, &w, &h, &err))
                goto fail;
            double t2 = now();
            CtImage im;
            if (image_decode(data, len, 1, &im, &err))
                goto fail;
            image_free(&im);
            double t3 = now();
            CtRng rng = rng_for(42, 0, i);
            if (transform_train(&tt, data, len, &rng, out, &err))
                goto fail;
            double t4 = now();
            if (transform_eval(&et, data, len, out, &err))
                goto fail;
            double t5 = now();
            t_read += t1 - t0;
            t_probe += t2 - t1;
            t_dec += t3 - t2;
            t_train += t4 - t3;
            t_eval += t5 - t4;
            bytes += (double)len;
            pixels += (double)w * h;
        }
    }
    printf("breakdown images=%zu mean_kbytes=%.1f mean_mpix=%.4f\n", n, bytes / n / 1024, pixels / n / 1e6);
    printf("breakdown per_image_ms read=%.3f probe=%.3f decode_full=%.3f train=%.3f eval=%.3f\n", t_read / n * 1e3,
           t_probe / n * 1e3, t_dec / n * 1e3, t_train / n * 1e3, t_eval / n * 1e3);
    printf("breakdown decode_full_mpix_per_s=%.1f\n", pixels / t_dec / 1e6);
    free(out);
    dataset_reader_close(r);
    return 0;
fail:
    fprintf(stderr, "bench_loader: %s\n", err.msg);
    free(out);
    dataset_reader_close(r);
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_loader --folder DIR [--threads 1,2] [--batch 32] [--epochs 3] [--img 224]\n"
                    "                    [--pipeline train,eval] [--breakdown]\n");
}

int main(int argc, char **argv)
{
    const char *folder = NULL, *threads = "1,2", *pipelines = "train,eval";
    int batch = 32, epochs = 3, img = 224, do_breakdown = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--breakdown")) {
            do_breakdown = 1;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--folder"))
            folder = v;
        else if (!strcmp(a, "--threads"))
            threads = v;
        else if (!strcmp(a, "--batch"))
            batch = atoi(v);
        else if (!strcmp(a, "--epochs"))
            epochs = atoi(v);
        else if (!strcmp(a, "--img"))
            img = atoi(v);
        else if (!strcmp(a, "--pipeline"))
            pipelines = v;
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (!folder || batch < 1 || epochs < 1 || epochs > 64 || img < 8) {
        usage();
        return 2;
    }
    DatasetConfig dc = {.root = folder};
    Dataset *ds;
    CtErr err;
    if (dataset_open(&ds, &dc, &err)) {
        fprintf(stderr, "bench_loader: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (do_breakdown)
        rc |= breakdown(ds, img);
    for (int train = 1; train >= 0 && rc == 0; train--) {
        if (!strstr(pipelines, train ? "train" : "eval"))
            continue;
        const char *p = threads;
        while (*p && rc == 0) {
            int t = atoi(p);
            if (t >= 1)
                rc |= run(ds, train, t, batch, epochs, img);
            p += strcspn(p, ",");
            if (*p == ',')
                p++;
        }
    }
    dataset_close(ds);
    return rc ? 1 : 0;
}
