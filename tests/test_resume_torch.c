/*
 * --resume from timm train.py checkpoints (train/resume_torch.h) against
 * what timm and torch wrote into tests/data/torch/ (tools/make_torch_ckpt.py):
 * resume_sgd.pth.tar, resume_adamw.pth.tar and resume_<opt>.pth.tar for
 * twelve more (Adan's previous gradient negated), each of an optimizer that timm's create_optimizer_v2 made and
 * stepped, into a test_resnet training
 * state (10 classes) whose optimizer is the file's. Every optimizer slot
 * under its ctimm name, by the CRC-32 of torch's bytes (resume_expected.txt),
 * the step, the epoch, the loss scaler, the weights and the model EMA
 * (expected.txt's sd and ema lines); --no-resume-opt leaves the optimizer
 * state as it was; and the refusals: another optimizer (by the args' --opt
 * and by the slots), another group layout (weight decay, layer decay),
 * another model.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/layer_groups.h"
#include "train/resume_torch.h"
#include "train_setup.h"

enum { CLASSES = 10 };

static char *expected, *resume_expected;

typedef StepSetup Setup;

/* A test_resnet training state of `classes` classes under opt, from seed 3. */
static int setup(Setup *u, const OptimSpec *opt, int classes)
{
    return step_setup(u, "test_resnet", 2, 32, classes, 0, opt, 3);
}

static void teardown(Setup *u) { step_teardown(u); }

static void data_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%.900s/torch/%.100s", test_data_dir(), name);
}

/* The rest of the next line of text past *at that begins "FILE KIND ",
 * into buf; 0 when there is none. */
static int next_line(const char *text, const char *file, const char *kind, const char **at, char *buf, size_t n)
{
    char head[200];
    snprintf(head, sizeof head, "%s %s ", file, kind);
    for (const char *s = *at; s && *s;) {
        const char *nl = strchr(s, '\n'), *end = nl ? nl : s + strlen(s);
        *at = nl ? nl + 1 : end;
        if (!strncmp(s, head, strlen(head))) {
            snprintf(buf, n, "%.*s", (int)(end - s - (int)strlen(head)), s + strlen(head));
            return 1;
        }
        s = *at;
    }
    return 0;
}

/* Every "FILE KIND NAME DTYPE SHAPE CRC" line against state entry
 * prefix+NAME; the count of lines. */
static int check_tensors(const CtState *s, const char *text, const char *file, const char *kind, const char *prefix)
{
    const char *at = text;
    char line[600], name[300], full[320], dtype[8], shape[48], want_shape[64];
    unsigned crc;
    int n = 0;
    while (next_line(text, file, kind, &at, line, sizeof line)) {
        n++;
        CHECKF(sscanf(line, "%299s %7s %47s %x", name, dtype, shape, &crc) == 4, "%s", line);
        snprintf(full, sizeof full, "%s%s", prefix, name);
        int i = state_find(s, full);
        CHECKF(i >= 0, "%s: no state entry '%s'", file, full);
        if (i < 0)
            continue;
        const StateEntry *e = &s->e[i];
        size_t k = 0, nbytes = (size_t)shape_numel(&e->type.shape) * ct_dtype_size(e->type.dtype);
        want_shape[0] = 0;
        for (int d = 0; d < e->type.shape.ndim; d++)
            k += (size_t)snprintf(want_shape + k, sizeof want_shape - k, "%s%lld", d ? "x" : "",
                                  (long long)e->type.shape.d[d]);
        CHECKF(!strcmp(shape, e->type.shape.ndim ? want_shape : "-"), "%s '%s': shape %s, file %s", file, full,
               want_shape, shape);
        CHECKF(!strcmp(dtype, ct_dtype_st_name(e->type.dtype)), "%s '%s'", file, full);
        unsigned got = test_crc32(state_data(s, i), nbytes);
        CHECKF(got == crc, "%s '%s': CRC %08x, want %08x", file, full, got, crc);
    }
    return n;
}

static int count_prefix(const CtState *s, const char *prefix)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += !strncmp(s->e[i].name, prefix, strlen(prefix));
    return n;
}

static int count_model(const CtState *s)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += s->e[i].role == CT_ROLE_PARAM || s->e[i].role == CT_ROLE_BUFFER;
    return n;
}

/* The state's optimizer entries all zero (as state_init leaves them, but for rmsproptf). */
static int optim_zero(const CtState *s)
{
    for (int i = 0; i < s->n; i++) {
        if (strncmp(s->e[i].name, "optim.", 6))
            continue;
        size_t nbytes = (size_t)shape_numel(&s->e[i].type.shape) * ct_dtype_size(s->e[i].type.dtype);
        for (size_t b = 0; b < nbytes; b++)
            if (((const unsigned char *)state_data(s, i))[b])
                return 0;
    }
    return 1;
}

/* The rest of the line "FILE KIND ...", into buf (n bytes). */
static const char *field(const char *text, const char *file, const char *kind, char *buf, size_t n)
{
    const char *at = text;
    return next_line(text, file, kind, &at, buf, n) ? buf : "(none)";
}

/* Resumes `file` into a fresh state of opt and checks it all against the
 * expected files; with_opt 0: --no-resume-opt. */
static void check_resume(const char *file, const OptimSpec *spec, const char *opt, int with_opt)
{
    Setup u;
    if (setup(&u, spec, CLASSES))
        return;
    char path[1024];
    data_path(path, sizeof path, file);
    ResumeOptim o = {.opt = opt, .weight_decay = spec->weight_decay};
    Resumed r;
    CtErr err = {{0}};
    CHECKF(resume_torch(path, &u.s, "test_resnet", with_opt ? &o : NULL, &r, &err) == 0, "%s: %s", file, err.msg);
    char want[64], epoch[64], step[64], scaler[64];
    snprintf(want, sizeof want, "%d", r.epoch);
    CHECKF(!strcmp(field(resume_expected, file, "epoch", epoch, sizeof epoch), want), "%s: epoch %d", file, r.epoch);
    CHECK(r.batches_done == -1 && !r.sched[0]);
    int nsd = check_tensors(&u.s, expected, file, "sd", ""), nema = check_tensors(&u.s, expected, file, "ema", "ema.");
    CHECKF(nsd > 80 && nsd == count_model(&u.s), "%s: %d weights", file, nsd);
    CHECKF(r.ema_missing == (nema == 0), "%s: ema_missing %d", file, r.ema_missing);
    CHECK(nema == 0 || nema == count_prefix(&u.s, "ema."));
    int at = state_find(&u.s, "optim.step");
    field(resume_expected, file, "step", step, sizeof step);
    field(resume_expected, file, "scaler", scaler, sizeof scaler);
    if (!with_opt) {
        CHECKF(optim_zero(&u.s), "%s: --no-resume-opt changed the optimizer state", file);
        CHECK(!r.has_scaler && isnan(r.opt_lr));
        teardown(&u);
        return;
    }
    int nopt = check_tensors(&u.s, resume_expected, file, "optim", "");
    CHECKF(nopt > 40 && nopt == count_prefix(&u.s, "optim.") - (at >= 0), "%s: %d optimizer tensors", file, nopt);
    if (at >= 0)
        CHECKF(atoll(step) == *(const int64_t *)state_data(&u.s, at), "%s: step %lld, want %s", file,
               (long long)*(const int64_t *)state_data(&u.s, at), step);
    else
        CHECKF(!strcmp(step, "-"), "%s: the run keeps no step but the file does (%s)", file, step);
    LossScaler sc = r.scaler;
    snprintf(want, sizeof want, "%.1f %.1f %.1f %d %d", sc.scale, sc.growth_factor, sc.backoff_factor,
             sc.growth_interval, sc.growth_tracker);
    CHECKF(r.has_scaler ? !strcmp(scaler, want) : !strcmp(scaler, "-"), "%s: scaler %s, want %s", file,
           r.has_scaler ? want : "-", scaler);
    CHECK_NEAR(r.opt_lr, 0.1, 1e-12);
    teardown(&u);
}

/* resume_torch of file into a state of spec (classes, opt, layer ids) fails naming each of the texts. */
static void check_refusal(const char *file, const OptimSpec *spec, int classes, const char *model,
                          const ResumeOptim *o, const char *text, const char *text2)
{
    Setup u;
    if (setup(&u, spec, classes))
        return;
    char path[1024];
    data_path(path, sizeof path, file);
    Resumed r;
    CtErr err = {{0}};
    CHECKF(resume_torch(path, &u.s, model, o, &r, &err) == -1, "%s should be refused (%s)", file, text);
    CHECKF(strstr(err.msg, text) && (!text2 || strstr(err.msg, text2)) && strstr(err.msg, path),
           "%s: '%s' lacks '%s'", file, err.msg, text);
    teardown(&u);
}

static void check_refusals(const OptimSpec *sgd, const OptimSpec *adamw)
{
    const char *only = "--no-resume-opt resumes the weights only";
    ResumeOptim o_sgd = {.opt = "sgd", .weight_decay = 2e-5}, o_adamw = {.opt = "adamw", .weight_decay = 0.05};
    check_refusal("resume_sgd.pth.tar", adamw, CLASSES, "test_resnet", &o_adamw,
                  "its optimizer is --opt sgd, the run's --opt adamw", only);
    check_refusal("resume_adamw.pth.tar", sgd, CLASSES, "test_resnet", &o_sgd,
                  "its optimizer keeps 'exp_avg' per param, which --opt sgd has no place for", only);
    OptimSpec sgd0 = *sgd;
    sgd0.weight_decay = 0;
    ResumeOptim o_sgd0 = {.opt = "sgd"};
    check_refusal("resume_sgd.pth.tar", &sgd0, CLASSES, "test_resnet", &o_sgd0,
                  "its optimizer has 2 param groups of 31, 16 params, --opt sgd here 1 param group of 47 params",
                  only);
    Setup u;
    if (setup(&u, sgd, CLASSES) == 0) { /* --layer-decay: timm's groups, a layer's no-decay then decay ones */
        int *ids = malloc(sizeof *ids * (size_t)u.g.nstate), n, nlayers;
        double *scale = malloc(sizeof *scale * (size_t)u.g.nstate);
        CtErr err = {{0}};
        CHECKF(layer_decay_params(&u.g, model_family(model_find("test_resnet"))->group_matcher, model_find("test_resnet")->cfg.classifier, 0.75, 0, ids, scale,
                                  &n, &nlayers, &err) == 0, "%s", err.msg);
        ResumeOptim o_ld = {.opt = "sgd", .weight_decay = 2e-5, .layer_ids = ids};
        check_refusal("resume_sgd.pth.tar", sgd, CLASSES, "test_resnet", &o_ld, "its optimizer has 2 param groups",
                      "--opt sgd here 12 param groups of 3, 6, 2, 4, 3, 6, 4, 8, 3, 6, 1, 1 params");
        free(ids);
        free(scale);
        teardown(&u);
    }
    static const char *const unread[] = {"adafactor", "adafactorbv", "muon"};
    for (int k = 0; k < 3; k++) {
        OptimSpec spec;
        CT_ASSERT(optim_defaults(unread[k], &spec) == 0);
        ResumeOptim o = {.opt = unread[k]};
        char want[64];
        snprintf(want, sizeof want, "reading torch's --opt %s state is not implemented", unread[k]);
        check_refusal("resume_adamw.pth.tar", &spec, CLASSES, "test_resnet", &o, want, only);
    }
    check_refusal("resume_sgd.pth.tar", sgd, CLASSES, "test_vit", &o_sgd, "a checkpoint of test_resnet, not of "
                  "--model test_vit", NULL);
    check_refusal("resume_sgd.pth.tar", sgd, 12, "test_resnet", &o_sgd, "'fc.weight' has shape [10,96] in the file "
                  "but the model needs [12,96]", NULL);
}

/* What the tags and aliases leave alone: a pretrained tag on --model, and
 * 'nesterov' for 'sgd'. */
static void check_aliases(const OptimSpec *sgd)
{
    Setup u;
    if (setup(&u, sgd, CLASSES))
        return;
    char path[1024];
    data_path(path, sizeof path, "resume_sgd.pth.tar");
    ResumeOptim o = {.opt = "nesterov", .weight_decay = 2e-5};
    Resumed r;
    CtErr err = {{0}};
    CHECKF(resume_torch(path, &u.s, "timm/test_resnet.r160_in1k", &o, &r, &err) == 0, "%s", err.msg);
    teardown(&u);
}

int main(void)
{
    char path[1024];
    data_path(path, sizeof path, "expected.txt");
    expected = test_read_text(path);
    data_path(path, sizeof path, "resume_expected.txt");
    resume_expected = test_read_text(path);
    CHECK(expected && resume_expected);
    if (!expected || !resume_expected)
        return check_done("test_resume_torch");
    OptimSpec sgd, adamw;
    CHECK(optim_defaults("sgd", &sgd) == 0 && optim_defaults("adamw", &adamw) == 0);
    sgd.weight_decay = 2e-5;
    adamw.weight_decay = 0.05;
    sgd.model_ema = adamw.model_ema = 1;
    check_resume("resume_sgd.pth.tar", &sgd, "sgd", 1);
    check_resume("resume_adamw.pth.tar", &adamw, "adamw", 1);
    check_resume("resume_adamw.pth.tar", &adamw, "adamw", 0);
    static const char *const others[] = {"sgdw", "nadam", "nadamw", "adamax", "adopt", "lamb", "lion", "madgrad",
                                         "sgdp", "adamp", "adan", "laprop"};
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        OptimSpec spec;
        char file[64];
        CHECK(optim_defaults(others[k], &spec) == 0);
        spec.weight_decay = 0.02;
        spec.model_ema = 1;
        snprintf(file, sizeof file, "resume_%s.pth.tar", others[k]);
        check_resume(file, &spec, others[k], 1);
    }
    check_refusals(&sgd, &adamw);
    check_aliases(&sgd);
    free(expected);
    free(resume_expected);
    return check_done("test_resume_torch");
}
