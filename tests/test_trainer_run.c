/* The trainer (train/trainer.h) on a tiny generated dataset, cpu backend
 * (one OpenBLAS thread, one loader worker: tests/CMakeLists.txt): two
 * epochs in one run equal one epoch and a resume from its checkpoint, bit
 * for bit, and so does a run stopped mid-epoch by the stop flag and
 * resumed from its recovery checkpoint; with the model EMA validated.
 * --grad-accum-steps: a run stopped inside a group of batches resumes
 * (accumulated gradients and all) bit for bit, and test_vit (no batch norm)
 * trained in batches of 4 accumulated by 2 ends where batches of 8 do. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/data/shapes.h"
#include "runtime/safetensors.h"
#include "train/trainer.h"

static volatile sig_atomic_t stop_flag;

/* The log, kept; with stop_at set, the stop flag raised at that line
 * (as a SIGINT handler would). */
typedef struct Log {
    char text[1 << 16];
    const char *stop_at;
} Log;

static void log_line(void *ctx, const char *line)
{
    Log *l = ctx;
    size_t n = strlen(l->text);
    snprintf(l->text + n, sizeof l->text - n, "%s", line);
    if (l->stop_at && !strncmp(line, l->stop_at, strlen(l->stop_at)))
        stop_flag = SIGINT;
}

static TrainArgs run_args(const char *root, int epochs, const char *output, const char *resume)
{
    TrainArgs a = train_args_default();
    a.data_dir = root;
    a.val_split = "val";
    a.img_size = 32;
    a.batch_size = 8;
    a.val_batch_size = 10;
    a.epochs = epochs;
    a.workers = 1;
    a.log_interval = 1;
    a.lr = 0.1;
    a.model_ema = 1;
    a.model = NULL;
    a.output = output;
    a.resume = resume;
    return a;
}

/* One run to its end or its stop: the trainer_run status; the trained
 * state kept in *state (malloc'd) when asked. */
static int run(const TrainArgs *a, CtDist *dist, Log *log, unsigned char **state, size_t *nbytes)
{
    const char *model = a->model ? a->model : "test_resnet";
    static const ProgramOptions opts = {.stop = &stop_flag};
    TrainReport rep = {.ctx = log, .log = log_line};
    Trainer t;
    CtErr err;
    stop_flag = 0;
    if (trainer_open(&t, a, model_find(model), &ct_backend_cpu, dist, &opts, &rep, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    int rc = trainer_run(&t, &err);
    CHECKF(rc != -1, "%s", err.msg);
    if (state) {
        *nbytes = t.state.nbytes;
        *state = malloc(t.state.nbytes);
        CT_ASSERT(*state != NULL);
        memcpy(*state, t.state.data, t.state.nbytes);
    }
    trainer_close(&t);
    return rc;
}

/* The line of `epoch` in dir's summary.csv, in line (empty when none). */
static void summary_line(const char *dir, int epoch, char *line, size_t n)
{
    char p[700], want[16];
    snprintf(p, sizeof p, "%s/summary.csv", dir);
    snprintf(want, sizeof want, "%d,", epoch);
    line[0] = 0;
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    char buf[512];
    while (fgets(buf, sizeof buf, f))
        if (!strncmp(buf, want, strlen(want)))
            snprintf(line, n, "%s", buf);
    fclose(f);
}

static void check_same(const char *what, const unsigned char *a, const unsigned char *b, size_t na, size_t nb,
                       const char *dir_a, const char *dir_b)
{
    CHECKF(na == nb && !memcmp(a, b, na), "%s: the trained states differ", what);
    char la[512], lb[512];
    summary_line(dir_a, 1, la, sizeof la);
    summary_line(dir_b, 1, lb, sizeof lb);
    CHECKF(la[0] && !strcmp(la, lb), "%s: epoch 1's summary: '%s' vs '%s'", what, la, lb);
}

/* The largest ||a-b||/||b|| over the tensors of two weights files. */
static double weights_rel(const char *pa, const char *pb)
{
    StFile fa, fb;
    CtErr err;
    double worst = INFINITY;
    if (st_read(pa, &fa, &err)) {
        CHECKF(0, "%s", err.msg);
        return worst;
    }
    if (st_read(pb, &fb, &err)) {
        CHECKF(0, "%s", err.msg);
        st_free(&fa);
        return worst;
    }
    worst = 0;
    for (int k = 0; k < fa.ntensors; k++) {
        const StTensor *x = &fa.tensors[k], *y = st_find(&fb, x->name);
        CHECKF(y && y->nbytes == x->nbytes, "%s: not in both files alike", x->name);
        if (!y || y->nbytes != x->nbytes || x->dtype != CT_F32)
            continue;
        const float *u = x->data, *v = y->data;
        double d = 0, n = 0;
        for (size_t i = 0; i < x->nbytes / 4; i++)
            d += ((double)u[i] - v[i]) * ((double)u[i] - v[i]), n += (double)v[i] * v[i];
        worst = fmax(worst, n > 0 ? sqrt(d / n) : sqrt(d));
    }
    st_free(&fa);
    st_free(&fb);
    return worst;
}

static void test_grad_accum(const char *root, const char *tmp, CtDist *dist, Log *log)
{
    char p[3][700], ckpt[800], out_b[720];
    for (int k = 0; k < 3; k++)
        snprintf(p[k], sizeof p[k], "%s/accum-%c", tmp, 'a' + k);
    unsigned char *whole = NULL, *recovered = NULL;
    size_t n_whole = 0, n_recovered = 0;
    /* 40 images in batches of 4, 3 to an update: 4 updates an epoch, the last of one batch */
    TrainArgs a = run_args(root, 2, p[0], NULL);
    a.batch_size = 4;
    a.grad_accum_steps = 3;
    log->text[0] = 0;
    CHECK(run(&a, dist, log, &whole, &n_whole) == 0);
    CHECKF(strstr(log->text, "Gradient accumulation: 3 batches an update, 4 updates an epoch") &&
           strstr(log->text, "Train: 1 [   4/4 (100%)]") && !strstr(log->text, "[   5/"), "%s", log->text);
    /* the flag raised at update 1's line (batch 3) stops the run after batch 4, inside update 2 */
    a.output = p[1];
    log->text[0] = 0;
    log->stop_at = "Train: 0 [   1/4";
    CHECK(run(&a, dist, log, NULL, NULL) == CT_INTERRUPTED);
    log->stop_at = NULL;
    CHECKF(strstr(log->text, "Interrupted at epoch 0, batch 4 of 10"), "%s", log->text);
    snprintf(ckpt, sizeof ckpt, "%s/recovery-0-3.safetensors", p[1]);
    a.resume = ckpt;
    log->text[0] = 0;
    CHECK(run(&a, dist, log, &recovered, &n_recovered) == 0);
    snprintf(out_b, sizeof out_b, "%s-1", p[1]);
    if (whole && recovered)
        check_same("grad accum stopped inside a group + recovery resume", whole, recovered, n_whole, n_recovered,
                   p[0], out_b);
    free(whole);
    free(recovered);

    /* test_vit: 8 a step against 4 twice, two epochs, no augmentation (the same images in the same order) */
    char last[2][800];
    for (int k = 0; k < 2; k++) {
        a = run_args(root, 2, p[2], NULL);
        a.model = "test_vit";
        a.no_aug = 1;
        a.model_ema = 0;
        a.opt = "momentum"; /* not Adam: the key bias's gradient is rounding noise, whose sign Adam steps by */
        a.weight_decay = 0.05;
        if (k) {
            a.batch_size = 4;
            a.grad_accum_steps = 2;
        }
        char dir[720];
        snprintf(dir, sizeof dir, "%s%s", p[2], k ? "-1" : "");
        log->text[0] = 0;
        CHECK(run(&a, dist, log, NULL, NULL) == 0);
        snprintf(last[k], sizeof last[k], "%s/last.safetensors", dir);
    }
    double rel = weights_rel(last[1], last[0]);
    printf("test_vit, batches of 4 accumulated by 2 vs batches of 8, two epochs: worst ||a-b||/||b|| %.3g\n", rel);
    CHECKF(rel <= 1e-5, "accumulated training ended %.3g away from the big batch's", rel);
}

int main(void)
{
    char tmp[] = "/tmp/ctimm-test-run-XXXXXX", root[600], p[4][700], ckpt[800];
    CtErr err;
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(root, sizeof root, "%s/data", tmp);
    ShapesConfig sc = {.img_size = 32, .train_per_class = 4, .val_per_class = 2, .quality = 90, .seed = 3};
    CHECKF(shapes_generate(root, &sc, NULL, &err) == 0, "%s", err.msg);
    CtDist *dist;
    CHECKF(dist_init(&dist, &err) == 0 && dist_world_size(dist) == 1, "%s", err.msg);
    for (int k = 0; k < 4; k++)
        snprintf(p[k], sizeof p[k], "%s/run-%c", tmp, 'a' + k);
    static Log log;
    unsigned char *two = NULL, *resumed = NULL, *recovered = NULL;
    size_t n_two = 0, n_resumed = 0, n_recovered = 0;

    /* 40 images in batches of 8: 5 steps an epoch, 10 in all */
    TrainArgs a = run_args(root, 2, p[0], NULL);
    CHECK(run(&a, dist, &log, &two, &n_two) == 0);
    CHECKF(strstr(log.text, "Train: 1 [   5/5 (100%)]") && strstr(log.text, "Test (EMA): [2/2]") &&
           strstr(log.text, "*** Best metric: "), "%s", log.text);

    /* one epoch, then --resume for the second */
    a = run_args(root, 1, p[1], NULL);
    CHECK(run(&a, dist, &log, NULL, NULL) == 0);
    snprintf(ckpt, sizeof ckpt, "%s/last.safetensors", p[1]);
    a = run_args(root, 2, p[1], ckpt);
    log.text[0] = 0;
    CHECK(run(&a, dist, &log, &resumed, &n_resumed) == 0);
    CHECKF(strstr(log.text, "(epoch 0); starting at epoch 1") && strstr(log.text, "-1 (") &&
           !strstr(log.text, "Train: 0 "), "%s", log.text);
    char out_b[720];
    snprintf(out_b, sizeof out_b, "%s-1", p[1]);
    if (two && resumed)
        check_same("one epoch + resume", two, resumed, n_two, n_resumed, p[0], out_b);

    /* stopped after epoch 0's fourth step (the flag raised at its third
     * line), then resumed from the recovery checkpoint */
    a = run_args(root, 2, p[2], NULL);
    log.text[0] = 0;
    log.stop_at = "Train: 0 [   3/5";
    CHECK(run(&a, dist, &log, NULL, NULL) == CT_INTERRUPTED);
    log.stop_at = NULL;
    CHECKF(strstr(log.text, "Interrupted at epoch 0, batch 4 of 5; resume with --resume ") &&
           strstr(log.text, "recovery-0-3.safetensors"), "%s", log.text);
    snprintf(ckpt, sizeof ckpt, "%s/recovery-0-3.safetensors", p[2]);
    a = run_args(root, 2, p[2], ckpt);
    log.text[0] = 0;
    CHECK(run(&a, dist, &log, &recovered, &n_recovered) == 0);
    CHECKF(strstr(log.text, "(epoch 0, 4 batches done); starting at epoch 0, batch 4") &&
           strstr(log.text, "Train: 0 [   5/5"), "%s", log.text);
    snprintf(out_b, sizeof out_b, "%s-1", p[2]);
    if (two && recovered)
        check_same("stopped + recovery resume", two, recovered, n_two, n_recovered, p[0], out_b);

    free(two);
    free(resumed);
    free(recovered);
    test_grad_accum(root, tmp, dist, &log);
    dist_finish(dist);
    test_rm_tree(tmp);
    return check_done("test_trainer_run");
}
