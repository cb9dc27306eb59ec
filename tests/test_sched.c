/* LR schedules against timm's own (tests/data/sched_refs.json, from
 * tools/make_sched_refs.py): train.py's sequence of step / step_update calls
 * replayed, every LR within 1e-12 relative, the scheduled epoch count equal,
 * and the LR after a resume. Noise included: ctimm draws it the way torch's
 * cpu generator does. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/sched.h"

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    CT_ASSERT(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* train.py's argument names -> SchedArgs, as scheduler_kwargs maps them. */
static SchedArgs args_from_json(const cJSON *j)
{
    SchedArgs a = sched_args_default();
    a.kind = (CtSchedKind)sched_kind_parse(cJSON_GetObjectItem(j, "sched")->valuestring);
    a.epochs = (int)num(j, "epochs");
    a.decay_epochs = num(j, "decay_epochs");
    a.n_milestones = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "decay_milestones")) a.decay_milestones[a.n_milestones++] =
        it->valueint;
    a.warmup_epochs = num(j, "warmup_epochs");
    a.warmup_lr = num(j, "warmup_lr");
    a.warmup_prefix = (int)num(j, "warmup_prefix");
    a.cooldown_epochs = (int)num(j, "cooldown_epochs");
    a.patience_epochs = (int)num(j, "patience_epochs");
    a.decay_rate = num(j, "decay_rate");
    a.min_lr = num(j, "min_lr");
    const cJSON *noise = cJSON_GetObjectItem(j, "lr_noise");
    a.n_noise = 0;
    cJSON_ArrayForEach(it, noise) if (a.n_noise < 2) a.noise[a.n_noise++] = it->valuedouble;
    a.noise_pct = num(j, "lr_noise_pct");
    a.noise_std = num(j, "lr_noise_std");
    a.noise_seed = (int)num(j, "seed");
    a.cycle_mul = num(j, "lr_cycle_mul");
    a.cycle_decay = num(j, "lr_cycle_decay");
    a.cycle_limit = (int)num(j, "lr_cycle_limit");
    a.k_decay = num(j, "lr_k_decay");
    a.plateau_min = strstr(cJSON_GetObjectItem(j, "eval_metric")->valuestring, "loss") != NULL;
    a.on_updates = (int)num(j, "sched_on_updates");
    return a;
}

static int close_rel(double a, double b) { return a == b || fabs(a - b) <= 1e-12 * fabs(b); }

static void check_case(const cJSON *c)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    SchedArgs a = args_from_json(cJSON_GetObjectItem(c, "args"));
    int upe = (int)num(c, "updates_per_epoch");
    const cJSON *lrs = cJSON_GetObjectItem(c, "lrs"), *metrics = cJSON_GetObjectItem(c, "metrics");
    int nm = cJSON_GetArraySize(metrics), bad = 0;
    LrSched s;
    CtErr err;
    if (sched_init(&s, &a, num(c, "base_lr"), upe, &err)) {
        CHECKF(0, "%s: %s", name, err.msg);
        return;
    }
    CHECKF(s.num_epochs == (int)num(c, "num_epochs"), "%s: %d scheduled epochs, timm %d", name, s.num_epochs,
           (int)num(c, "num_epochs"));
    int per = a.on_updates ? upe : 1;
    CHECKF(cJSON_GetArraySize(lrs) == s.num_epochs * per, "%s: %d reference points", name, cJSON_GetArraySize(lrs));
    long k = 0, updates = 0;
    for (int e = 0; e < s.num_epochs; e++) {
        for (int u = 0; u < per; u++, k++) {
            double want = cJSON_GetArrayItem(lrs, (int)k) ? cJSON_GetArrayItem(lrs, (int)k)->valuedouble : NAN;
            if (!close_rel(sched_lr(&s), want) && bad++ < 3)
                CHECKF(0, "%s: epoch %d update %d: lr %.17g, timm %.17g", name, e, u, sched_lr(&s), want);
            if (a.on_updates)
                sched_step_update(&s, ++updates);
        }
        sched_step_metric(&s, e + 1, cJSON_GetArrayItem(metrics, e % nm)->valuedouble);
    }
    CHECKF(bad == 0, "%s: %d of %ld learning rates differ from timm's", name, bad, k);
    /* resume: a fresh schedule stepped straight to the epoch */
    int re = (int)num(c, "resume_epoch");
    sched_init(&s, &a, num(c, "base_lr"), upe, &err);
    if (a.on_updates)
        sched_step_update(&s, (long)re * upe);
    else
        sched_step(&s, re);
    CHECKF(close_rel(sched_lr(&s), num(c, "resume_lr")), "%s: resumed at %d: lr %.17g, timm %.17g", name, re,
           sched_lr(&s), num(c, "resume_lr"));
}

/* torch.Generator().manual_seed(s); torch.randn(1) draws, seen in python. */
static void test_noise(void)
{
    CHECK(sched_noise(42, 10) == (double)0.33669036626815796f);
    CHECK(sched_noise(43, 10) == (double)-0.6484010815620422f);
    /* rejected draws: the cached Box-Muller sine, then a fresh pair */
    CHECK(sched_noise(43, 0.645) == (double)0.6432183980941772f);
    CHECK(sched_noise(7, 0.5) == (double)-0.1467950940132141f);
}

static void test_refusals(void)
{
    LrSched s;
    CtErr err;
    SchedArgs a = sched_args_default();
    a.kind = CT_SCHED_PLATEAU;
    a.on_updates = 1;
    CHECK(sched_init(&s, &a, 0.1, 10, &err) == -1 && strstr(err.msg, "plateau"));
    a = sched_args_default();
    a.on_updates = 1;
    CHECK(sched_init(&s, &a, 0.1, 0, &err) == -1);
    CHECK(sched_kind_parse("cosine") == CT_SCHED_COSINE && sched_kind_parse("none") == CT_SCHED_NONE);
    CHECK(sched_kind_parse("wsd") == -1);
}

int main(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sched_refs.json", test_data_dir());
    char *text = test_read_text(path);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    CHECKF(cJSON_IsArray(j), "cannot read %s", path);
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, j)
    {
        check_case(c);
        n++;
    }
    CHECK(n >= 20);
    test_noise();
    test_refusals();
    cJSON_Delete(j);
    free(text);
    return check_done("test_sched");
}
