/* The trainer's small parts: ModelEmaV3's decay and the EMA's copies, the
 * loss scaler's and LR schedule's checkpoint strings read back exactly, the
 * validation meter, the run folder's numbering, and the argument checks
 * and record (train/ema.c, runtime/scaler.c, runtime/sched.c,
 * train/meter.c, train/run_dir.c, train/args.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "models/registry.h"
#include "passes/pipeline.h"
#include "runtime/scaler.h"
#include "runtime/sched.h"
#include "train/args.h"
#include "train/ema.h"
#include "train/meter.h"
#include "train/run_dir.h"

/* timm's ModelEmaV3.get_decay(step): max(0, step - 1) updates before;
 * warmup 1 - (1 + s)^(-2/3), capped at the decay. */
static void test_ema_decay(void)
{
    CHECK(ema_decay(0.9998, 0, 1) == 0);
    CHECK(ema_decay(0.9998, 1, 1) == 0);
    CHECK(ema_decay(0.9998, 0, 2) == 0.9998);
    CHECK(ema_decay(0.9998, 0, 1000000) == 0.9998);
    CHECK_NEAR(ema_decay(0.9998, 1, 2), 1 - pow(2, -2.0 / 3), 1e-15); /* 0.370039... */
    CHECK_NEAR(ema_decay(0.9998, 1, 9), 1 - pow(9, -2.0 / 3), 1e-15);
    CHECK(ema_decay(0.9998, 1, 1000000000) == 0.9998); /* 1 - 1e-6 would pass the decay */
    CHECK(ema_decay(0.5, 1, 3) == 0.5);                /* 1 - 3^(-2/3) = 0.52 > 0.5 */
    for (long s = 2; s < 200; s++) /* warmup rises to the decay, never past it */
        CHECK(ema_decay(0.99, 1, s) >= ema_decay(0.99, 1, s - 1) && ema_decay(0.99, 1, s) <= 0.99);
}

/* The EMA starts as the model's copy; the eval graph validates the EMA's
 * values, and the model's where the EMA has none. */
static void test_ema_copies(void)
{
    const ModelEntry *m = model_find("test_resnet");
    ModelSpec spec = {.batch_size = 2, .training = 1, .args = {.num_classes = 4, .img_size = 32}};
    Pipeline p = {.training = 1, .loss = {CT_LOSS_CROSS_ENTROPY, 0, -1, 0},
                  .opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .model_ema = 1}, .verify = 1};
    Graph train, eval;
    CtErr err;
    CHECKF(model_build(m, &spec, &train, &err) == 0 && pipeline_run(&p, &train, NULL, &err) == 0, "%s", err.msg);
    spec.training = 0;
    CHECKF(model_build(m, &spec, &eval, &err) == 0, "%s", err.msg);
    CtState s, view;
    state_create(&s, &train);
    state_init(&s, 7);
    int w = state_find(&s, "fc.weight"), ew = state_find(&s, "ema.fc.weight");
    CHECK(w >= 0 && ew >= 0);
    if (w < 0 || ew < 0)
        goto done;
    size_t bytes = sizeof(float) * (size_t)shape_numel(&s.e[w].type.shape);
    CHECK(memcmp(state_data(&s, w), state_data(&s, ew), bytes) != 0); /* the EMA is zeros before */
    ema_from_model(&s);
    CHECK(memcmp(state_data(&s, w), state_data(&s, ew), bytes) == 0);
    ((float *)state_data(&s, ew))[0] += 1; /* the EMA moves apart */
    state_create(&view, &eval);
    ema_view(&view, &s);
    int vw = state_find(&view, "fc.weight");
    CHECK(vw >= 0 && memcmp(state_data(&view, vw), state_data(&s, ew), bytes) == 0);
    for (int i = 0; i < view.n; i++) { /* every value the eval graph reads is an EMA's or the model's */
        char name[600];
        snprintf(name, sizeof name, "ema.%s", view.e[i].name);
        int k = state_find(&s, name);
        k = k >= 0 ? k : state_find(&s, view.e[i].name);
        CHECKF(k >= 0 && !memcmp(state_data(&view, i), state_data(&s, k), ct_dtype_size(view.e[i].type.dtype) *
                                                                           (size_t)shape_numel(&view.e[i].type.shape)),
               "%s", view.e[i].name);
    }
    state_free(&view);
done:
    state_free(&s);
    graph_free(&train);
    graph_free(&eval);
}

/* The loss scaler's state through its checkpoint string, to the bit. */
static void test_scaler_string(void)
{
    LossScaler a = scaler_default(), b = scaler_default();
    for (int k = 0; k < 37; k++) /* scales no short decimal holds */
        scaler_update(&a, k % 3 != 0);
    a.scale *= 1.0 / 3;
    char buf[64];
    scaler_format(&a, buf, sizeof buf);
    CHECK(scaler_parse(&b, buf) == 0);
    CHECKF(b.scale == a.scale && b.growth_tracker == a.growth_tracker, "%s", buf);
    CHECK(b.growth_interval == a.growth_interval && b.backoff_factor == a.backoff_factor);
    LossScaler c = b;
    CHECK(scaler_parse(&c, "65536") == -1 && c.scale == b.scale && c.growth_tracker == b.growth_tracker);
    CHECK(scaler_parse(&c, "") == -1 && c.scale == b.scale);
}

/* The plateau schedule's state through its checkpoint string: the copy
 * goes on exactly as the original. */
static void test_sched_string(void)
{
    SchedArgs sa = sched_args_default();
    sa.kind = CT_SCHED_PLATEAU;
    sa.epochs = 20;
    sa.warmup_epochs = 0;
    sa.patience_epochs = 1;
    sa.cooldown_epochs = 1;
    sa.decay_rate = 0.3;
    sa.n_noise = 1;
    sa.noise[0] = 0.1; /* noise from epoch 2: the plateau's restore state is used */
    LrSched a, b;
    CtErr err;
    CHECKF(sched_init(&a, &sa, 0.1, 10, &err) == 0, "%s", err.msg);
    b = a;
    const double metrics[] = {2.0, 1.9, 1.95, 1.96, 1.97, 1.5, 1.6, 1.7};
    for (int e = 0; e < 8; e++)
        sched_step_metric(&a, e + 1, metrics[e]);
    char buf[SCHED_STATE_LEN];
    sched_format(&a, buf, sizeof buf);
    CHECK(strlen(buf) < sizeof buf - 1);
    CHECK(sched_parse(&b, buf) == 0);
    CHECKF(b.lr == a.lr && b.best == a.best && b.restore_lr == a.restore_lr && b.num_bad == a.num_bad &&
           b.cooldown_counter == a.cooldown_counter && b.has_restore == a.has_restore, "%s", buf);
    CHECK(a.lr < 0.1); /* the run above did reduce it */
    for (int e = 8; e < 14; e++) {
        sched_step_metric(&a, e + 1, 1.8 - 0.01 * e);
        sched_step_metric(&b, e + 1, 1.8 - 0.01 * e);
        CHECKF(a.lr == b.lr, "epoch %d: %.17g vs %.17g", e, a.lr, b.lr);
    }
    LrSched c = b;
    CHECK(sched_parse(&c, "0.1,2,3") == -1 && c.lr == b.lr && c.num_bad == b.num_bad);
}

/* Loss and top-k as torch computes them, the same whether the images come
 * in one batch or two. */
static void test_meter(void)
{
    enum { C = 6 };
    const float logits[3 * C] = {5, 1, 0, 0, 0, 0,  /* label 0: top-1 */
                                 1, 2, 3, 4, 5, 6,  /* label 1: rank 4, top-5 only */
                                 0, 0, 0, 0, 0, 0}; /* label 5: ties by index, rank 5 */
    const int64_t labels[3] = {0, 1, 5};
    EvalMeter one = {0}, two = {0};
    EvalBatch b = eval_meter_add(&one, logits, C, labels, 3);
    eval_meter_add(&two, logits, C, labels, 1);
    eval_meter_add(&two, logits + C, C, labels + 1, 2);
    double l0 = log(exp(5.0) + exp(1.0) + 4) - 5, l1 = log(exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0) + exp(5.0) + exp(6.0)) - 2,
           l2 = log(6.0);
    CHECK_NEAR(eval_loss(&one), (l0 + l1 + l2) / 3, 1e-12);
    CHECK_NEAR(b.loss, eval_loss(&one), 1e-12);
    CHECK_NEAR(eval_top1(&one), 100.0 / 3, 1e-12);
    CHECK_NEAR(eval_top5(&one), 200.0 / 3, 1e-12);
    CHECK_NEAR(eval_loss(&two), eval_loss(&one), 1e-12);
    CHECK(eval_top1(&two) == eval_top1(&one) && eval_top5(&two) == eval_top5(&one));
    CHECK(eval_rank(logits + C, C, 1) == 4 && eval_rank(logits + 2 * C, C, 5) == 5);
    EvalMeter none = {0};
    CHECK(isnan(eval_loss(&none)) && isnan(eval_top1(&none)));
}

/* get_outdir(inc=True): a new or empty folder is taken, else the next free
 * -N; parents are made. */
static void test_run_dir(const char *tmp)
{
    char want[512], got[600], p[700];
    CtErr err;
    snprintf(want, sizeof want, "%s/runs/a", tmp);
    CHECKF(run_dir_new(want, got, sizeof got, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(got, want));
    CHECKF(run_dir_new(want, got, sizeof got, &err) == 0 && !strcmp(got, want), "an empty folder is reused: %s", got);
    snprintf(p, sizeof p, "%s/summary.csv", want);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    CHECKF(run_dir_new(want, got, sizeof got, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s-1", want);
    CHECK(!strcmp(got, p));
    snprintf(p, sizeof p, "%s-1/summary.csv", want);
    f = fopen(p, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    CHECKF(run_dir_new(want, got, sizeof got, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s-2", want);
    CHECKF(!strcmp(got, p), "%s", got);
}

/* The refusals name the flag; the record holds the values and lists. */
static void test_args(void)
{
    TrainArgs a = train_args_default();
    CtErr err;
    CHECKF(train_args_check(&a, &err) == 0, "%s", err.msg);
    a.momentum = -1;
    CHECK(train_args_check(&a, &err) == -1 && strstr(err.msg, "--momentum -1: must be >= 0"));
    a = train_args_default();
    a.sched = "wsd";
    CHECK(train_args_check(&a, &err) == -1 && strstr(err.msg, "--sched wsd is not one of"));
    a = train_args_default();
    a.amp = 1;
    a.amp_dtype = "float8";
    CHECK(train_args_check(&a, &err) == -1 && strstr(err.msg, "--amp-dtype float8"));
    a = train_args_default();
    a.dist_bn = "";
    CHECKF(train_args_check(&a, &err) == 0, "'' is --dist-bn none: %s", err.msg);
    a.aa = "bogus";
    CHECK(train_args_check(&a, &err) == -1 && strstr(err.msg, "--aa bogus: "));
    a = train_args_default();
    a.sch.n_milestones = 2;
    a.sch.decay_milestones[0] = 10;
    a.sch.decay_milestones[1] = 20;
    a.mixup_mode = "pair";
    char *j = train_args_json(&a);
    CHECKF(strstr(j, "\"decay_milestones\":[10,20]") && strstr(j, "\"mixup_mode\":\"pair\"") &&
           strstr(j, "\"batch_size\":32") && !strstr(j, "\"resume\""), "%s", j);
    free(j);
}

int main(void)
{
    test_ema_decay();
    test_ema_copies();
    test_scaler_string();
    test_sched_string();
    test_meter();
    char tmp[] = "/tmp/ctimm-test-state-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    test_run_dir(tmp);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    test_args();
    return check_done("test_trainer_state");
}
