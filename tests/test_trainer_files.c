/* What the trainer scores and leaves on disk (train/meter.c,
 * train/checkpoint.c): torch.topk's order with NaN logits; a NaN metric
 * never the best; a checkpoint pair as one unit across a kill between its
 * two renames; the leftovers of killed runs cleaned. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/meter.h"

static void test_rank_nan(void)
{
    /* torch.topk(largest=True) on CPU puts NaN first, ties by index */
    const float all_nan[2] = {NAN, NAN};
    CHECK(eval_rank(all_nan, 2, 0) == 0);
    CHECK(eval_rank(all_nan, 2, 1) == 1);
    const float one_nan[3] = {1, NAN, 2};
    CHECK(eval_rank(one_nan, 3, 1) == 0);
    CHECK(eval_rank(one_nan, 3, 2) == 1);
    CHECK(eval_rank(one_nan, 3, 0) == 2);
    const float ties[3] = {3, 3, -INFINITY};
    CHECK(eval_rank(ties, 3, 1) == 1 && eval_rank(ties, 3, 2) == 2);
    /* a batch of NaN rows scores as torch's accuracy(): only label 0 hits */
    float logits[4 * 2];
    for (int k = 0; k < 8; k++)
        logits[k] = NAN;
    const int64_t labels[4] = {0, 1, 1, 1};
    EvalMeter m = {0};
    EvalBatch b = eval_meter_add(&m, logits, 2, labels, 4);
    CHECKF(b.top1 == 25 && b.top5 == 100, "top1 %g top5 %g", b.top1, b.top5);
    CHECK(isnan(b.loss) && isnan(eval_loss(&m)));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECKF(f != NULL, "%s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int exists(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static char *slurp(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return test_read_text(p);
}

/* A kill between the state's rename and the weights': the weights follow.
 * A kill before the first rename: the .next files go, the old pair stays. */
static void test_settle(const char *dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s/last.safetensors", dir);
    write_file(p, "old weights");
    snprintf(p, sizeof p, "%s/last.state.safetensors", dir);
    write_file(p, "new state");
    snprintf(p, sizeof p, "%s/last.safetensors.next", dir);
    write_file(p, "new weights");
    CHECK(ckpt_settle_pair(dir, "last") == 1);
    char *w = slurp(dir, "last.safetensors");
    CHECK(w && !strcmp(w, "new weights"));
    free(w);
    CHECK(!exists(dir, "last.safetensors.next"));

    snprintf(p, sizeof p, "%s/last.state.safetensors.next", dir);
    write_file(p, "newer state");
    snprintf(p, sizeof p, "%s/last.safetensors.next", dir);
    write_file(p, "newer weights");
    CHECK(ckpt_settle_pair(dir, "last") == 1);
    w = slurp(dir, "last.safetensors");
    char *st = slurp(dir, "last.state.safetensors");
    CHECK(w && st && !strcmp(w, "new weights") && !strcmp(st, "new state"));
    free(w);
    free(st);
    CHECK(!exists(dir, "last.safetensors.next") && !exists(dir, "last.state.safetensors.next"));
    CHECK(ckpt_settle_pair(dir, "last") == 0);
}

/* Leftovers of killed runs: temporary files of dead processes, old hard
 * links, state halves without weights, older recovery pairs. */
static void test_clean(const char *dir)
{
    static const char *const junk[] = {"last.safetensors.tmp.999999999", "model_best.safetensors.tmp-link",
                                       "checkpoint-3.state.safetensors", "recovery-0-4.safetensors",
                                       "recovery-0-4.state.safetensors", "recovery-1-2.safetensors",
                                       "recovery-1-2.state.safetensors", NULL};
    static const char *const kept[] = {"recovery-1-7.safetensors", "recovery-1-7.state.safetensors",
                                       "recovery-0-9.safetensors", "recovery-0-9.state.safetensors",
                                       "notes.state.safetensors", "averaged.safetensors", NULL};
    char p[512];
    for (int k = 0; junk[k]; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, junk[k]);
        write_file(p, "x");
    }
    for (int k = 0; kept[k]; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, kept[k]);
        write_file(p, "x");
    }
    snprintf(p, sizeof p, "%s/last.safetensors.tmp.%ld", dir, (long)getpid()); /* a live writer's: kept */
    write_file(p, "x");
    int fixed = ckpt_clean_dir(dir, "recovery-0-9");
    CHECKF(fixed == 7, "%d files fixed", fixed);
    for (int k = 0; junk[k]; k++)
        CHECKF(!exists(dir, junk[k]), "%s is still there", junk[k]);
    for (int k = 0; kept[k]; k++)
        CHECKF(exists(dir, kept[k]), "%s was removed", kept[k]);
    unlink(p);
}

/* A NaN metric is saved as last but is neither kept nor the best. */
static void test_saver_nan(const char *dir)
{
    Graph g;
    CtState s;
    CtErr err;
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    spec.args.num_classes = 2;
    spec.args.img_size = 32;
    CHECKF(model_build(model_find("test_resnet"), &spec, &g, &err) == 0, "%s", err.msg);
    state_create(&s, &g);
    state_init(&s, 1);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/saver", dir);
    mkdir(sub, 0755);
    Saver sv;
    saver_init(&sv, sub, 2, 0);
    CkptInfo info = {.model = "test_resnet", .eval_metric = "top1", .args_json = "{}", .num_classes = 2};
    CHECKF(saver_save(&sv, &s, &info, 0, NAN, &err) == 0, "%s", err.msg);
    CHECK(exists(sub, "last.safetensors") && !exists(sub, "model_best.safetensors"));
    CHECK(!exists(sub, "checkpoint-0.safetensors") && sv.best_epoch < 0);
    CHECKF(saver_save(&sv, &s, &info, 1, 50, &err) == 0, "%s", err.msg);
    CHECK(exists(sub, "model_best.safetensors") && sv.best_epoch == 1);
    CHECKF(saver_save(&sv, &s, &info, 2, NAN, &err) == 0, "%s", err.msg);
    CHECK(sv.best_epoch == 1 && sv.nfiles == 1 && !exists(sub, "checkpoint-2.safetensors"));
    /* the pair on disk is one save: resumable, nothing left over */
    Resumed r;
    char last[600];
    snprintf(last, sizeof last, "%s/last.safetensors", sub);
    CHECKF(ckpt_resume(last, &s, "test_resnet", 1, &r, &err) == 0, "%s", err.msg);
    CHECK(r.epoch == 2);
    CHECK(ckpt_clean_dir(sub, NULL) == 0);
    saver_free(&sv);
    state_free(&s);
    graph_free(&g);
}

/* A small model's state for the savers below. */
static int make_state(Graph *g, CtState *s)
{
    CtErr err;
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    spec.args.num_classes = 2;
    spec.args.img_size = 32;
    if (model_build(model_find("test_resnet"), &spec, g, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    state_create(s, g);
    state_init(s, 1);
    return 0;
}

/* Whether dir/a and dir/b hold the same bytes. */
static int same_file(const char *dir, const char *a, const char *b)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    int same = fa && fb;
    while (same) {
        int ca = getc(fa), cb = getc(fb);
        same = ca == cb;
        if (ca == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* timm's CheckpointSaver: the best max_hist epochs kept, a tie not
 * replacing a kept one, model_best the best so far; lower is better for
 * a loss. */
static void test_saver_keep(const char *dir)
{
    Graph g;
    CtState s;
    CtErr err;
    if (make_state(&g, &s))
        return;
    char sub[300];
    snprintf(sub, sizeof sub, "%s/keep", dir);
    mkdir(sub, 0755);
    CkptInfo info = {.model = "test_resnet", .eval_metric = "top1", .args_json = "{}", .num_classes = 2};
    Saver sv;
    saver_init(&sv, sub, 2, 0);
    const double top1[] = {10, 30, 20, 40, 30};
    for (int e = 0; e < 5; e++) {
        ((float *)s.data)[0] = (float)e; /* each epoch's weights differ */
        CHECKF(saver_save(&sv, &s, &info, e, top1[e], &err) == 0, "%s", err.msg);
    }
    CHECK(sv.nfiles == 2 && sv.files[0].epoch == 3 && sv.files[1].epoch == 1);
    CHECK(sv.best_epoch == 3 && sv.best == 40);
    static const char *const gone[] = {"checkpoint-0.safetensors", "checkpoint-2.safetensors",
                                       "checkpoint-4.safetensors", "checkpoint-0.state.safetensors", NULL};
    for (int k = 0; gone[k]; k++)
        CHECKF(!exists(sub, gone[k]), "%s was kept", gone[k]);
    CHECK(exists(sub, "checkpoint-1.state.safetensors") && exists(sub, "checkpoint-3.state.safetensors"));
    CHECK(same_file(sub, "model_best.safetensors", "checkpoint-3.safetensors"));
    CHECK(!same_file(sub, "last.safetensors", "checkpoint-3.safetensors")); /* last is epoch 4's */
    saver_free(&sv);

    snprintf(sub, sizeof sub, "%s/keep-loss", dir);
    mkdir(sub, 0755);
    saver_init(&sv, sub, 3, 1);
    const double loss[] = {2.0, 1.5, 1.5, 1.8};
    for (int e = 0; e < 4; e++)
        CHECKF(saver_save(&sv, &s, &info, e, loss[e], &err) == 0, "%s", err.msg);
    /* ties in the order they came (Python's stable sort); the worst, 2.0, gave way */
    CHECK(sv.nfiles == 3 && sv.files[0].epoch == 1 && sv.files[1].epoch == 2 && sv.files[2].epoch == 3);
    CHECK(sv.best_epoch == 1 && !exists(sub, "checkpoint-0.safetensors"));
    CHECK(saver_better(&sv, 1.0, 1.5) && !saver_better(&sv, 1.5, 1.5));
    saver_free(&sv);
    state_free(&s);
    graph_free(&g);
}

/* What --resume reads back: a recovery checkpoint's place in its epoch,
 * loss sum, loss scaler and schedule state; the saver's newest recovery
 * pair only; the refusals. */
static void test_resume_meta(const char *dir)
{
    Graph g;
    CtState s;
    CtErr err;
    if (make_state(&g, &s))
        return;
    char sub[300], path[600];
    snprintf(sub, sizeof sub, "%s/resume", dir);
    mkdir(sub, 0755);
    LossScaler sc = scaler_default();
    sc.scale = 1024.0 / 3;
    sc.growth_tracker = 7;
    char sc_str[64], sched_str[SCHED_STATE_LEN] = "0.05,1.25,0,2,0,0";
    scaler_format(&sc, sc_str, sizeof sc_str);
    CkptInfo info = {.model = "test_resnet", .eval_metric = "loss", .args_json = "{}", .num_classes = 2,
                     .amp_scaler = sc_str, .sched = sched_str};
    Saver sv;
    saver_init(&sv, sub, 2, 1);
    CHECKF(saver_save_recovery(&sv, &s, &info, 3, 6, 1.5, 7, &err) == 0, "%s", err.msg);
    CHECKF(saver_save_recovery(&sv, &s, &info, 3, 13, 0.1 + 0.2, 14, &err) == 0, "%s", err.msg);
    CHECK(!exists(sub, "recovery-3-6.safetensors") && !exists(sub, "recovery-3-6.state.safetensors"));
    CHECK(!strcmp(sv.recovery, "recovery-3-13"));
    float w0 = ((float *)s.data)[0];
    ((float *)s.data)[0] = w0 + 1;
    Resumed r;
    snprintf(path, sizeof path, "%s/recovery-3-13.safetensors", sub);
    CHECKF(ckpt_resume(path, &s, "test_resnet", 1, &r, &err) == 0, "%s", err.msg);
    CHECK(((float *)s.data)[0] == w0);
    CHECK(r.epoch == 3 && r.batches_done == 14 && r.loss_sum == 0.1 + 0.2 && r.loss_count == 14);
    CHECK(r.has_scaler && r.scaler.scale == sc.scale && r.scaler.growth_tracker == 7);
    CHECK(!strcmp(r.sched, sched_str));
    /* an epoch's checkpoint: the epoch done, no scaler without AMP */
    info.amp_scaler = NULL;
    CHECKF(saver_save(&sv, &s, &info, 4, 1.0, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/last.safetensors", sub);
    CHECKF(ckpt_resume(path, &s, "test_resnet", 0, &r, &err) == 0, "%s", err.msg);
    CHECK(r.epoch == 4 && r.batches_done == -1 && !r.has_scaler);
    CHECK(ckpt_resume(path, &s, "test_vit", 1, &r, &err) == -1 && strstr(err.msg, "a checkpoint of test_resnet"));
    snprintf(path, sizeof path, "%s/nothing.safetensors", sub);
    CHECK(ckpt_resume(path, &s, "test_resnet", 1, &r, &err) == -1 && strstr(err.msg, "is missing"));
    saver_free(&sv);
    state_free(&s);
    graph_free(&g);
}

int main(void)
{
    test_rank_nan();
    char dir[] = "/tmp/ctimm-test-files-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_settle(dir);
    test_clean(dir);
    test_saver_nan(dir);
    test_saver_keep(dir);
    test_resume_meta(dir);
    test_rm_tree(dir);
    return check_done("test_trainer_files");
}
