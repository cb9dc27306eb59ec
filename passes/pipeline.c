/* The pass pipeline (pipeline.h): the table of stages and the loop that runs
 * them, with the verifier between them when asked. */
#include "passes/pipeline.h"

#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

/* *g replaced by the pass's output `next` (rc 0); on failure the pass freed
 * next, and *g is freed too. */
static int adopt(int rc, Graph *g, Graph *next)
{
    graph_free(g);
    if (rc == 0)
        *g = *next;
    return rc;
}

static int run_input(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    Graph next;
    return adopt(input_image(g, &p->input, &next, err), g, &next);
}

static int run_bn_fold(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    Graph next;
    return adopt(bn_fold(g, &next, err), g, &next);
}

static int run_amp(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    Graph next;
    return adopt(amp_cast(g, p->amp_dtype, &next, err), g, &next);
}

static int ask_remat(const Pipeline *p) { return p->remat.nunits > 0 || p->remat.budget > 0 || p->remat.cheap; }

static int run_autodiff(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    OptimSpec opt = p->opt;
    opt.step_in_backward |= p->remat.nunits > 0 || p->remat.budget > 0;
    if (train_step_build(g, g->outputs[0], &p->loss, &opt, &r->ts, err)) {
        graph_free(g);
        return -1;
    }
    for (int k = 0; k < g->noutputs; k++)
        if (r->ts.finite >= 0 && g->outputs[k] == r->ts.finite)
            r->finite_out = k;
    return 0;
}

static int run_layout(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    Graph next;
    return adopt(layout_channels_last(g, &next, err), g, &next);
}

static int run_remat(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    Graph next;
    return adopt(remat(g, &p->remat, &next, &r->remat, err), g, &next);
}

static int ask_always(const Pipeline *p) { return 1; }
static int ask_input(const Pipeline *p) { return p->input.u8; }
static int ask_bn_fold(const Pipeline *p) { return p->bn_fold; }
static int ask_amp(const Pipeline *p) { return p->amp; }
static int ask_layout(const Pipeline *p) { return p->channels_last; }

static const PassDef table[] = {
    {"build", NULL, ask_always, PASS_DUMP},
    {"input", run_input, ask_input, PASS_NAMED | PASS_DUMP},
    {"bn_fold", run_bn_fold, ask_bn_fold, PASS_EVAL_ONLY | PASS_NAMED | PASS_DUMP},
    {"amp", run_amp, ask_amp, PASS_NAMED | PASS_DUMP},
    {"autodiff", run_autodiff, ask_always, PASS_TRAIN_ONLY | PASS_DUMP},
    {"layout", run_layout, ask_layout, PASS_NAMED | PASS_DUMP},
    {"remat", run_remat, ask_remat, PASS_TRAIN_ONLY | PASS_NAMED | PASS_DUMP},
    {"fuse", NULL, NULL, PASS_NAMED | PASS_DUMP},
    {"plan", NULL, NULL, PASS_NAMED},
    {"stats", NULL, NULL, PASS_NAMED},
};
#define NTABLE ((int)(sizeof table / sizeof table[0]))
_Static_assert(NTABLE <= PIPELINE_MAX_STAGES, "PipelineResult.ran holds every stage");

const PassDef *pass_find(const char *name)
{
    for (int i = 0; i < NTABLE; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

/* Calls each(name, ctx) for every name of the comma-separated list ("none":
 * no names) until it returns non-zero; returns that, or 0. */
static int each_name(const char *list, int (*each)(const char *name, void *ctx), void *ctx)
{
    if (!list || !strcmp(list, "none"))
        return 0;
    for (const char *s = list;;) {
        const char *comma = strchr(s, ',');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(comma ? comma - s : (long)strlen(s)), s);
        int rc = each(name, ctx);
        if (rc || !comma)
            return rc;
        s = comma + 1;
    }
}

typedef struct Lookup {
    const PassDef *const *stages;
    int n;
    unsigned flag;
    const char *name; /* is_name: the name looked for */
    char bad[64];     /* unknown: the first name the stages lack */
} Lookup;

/* 0 when the stages hold `name` with l->flag; else 1 (the stop), the name kept. */
static int unknown(const char *name, void *ctx)
{
    Lookup *l = ctx;
    for (int i = 0; i < l->n; i++)
        if ((l->stages[i]->flags & l->flag) && !strcmp(l->stages[i]->name, name))
            return 0;
    snprintf(l->bad, sizeof l->bad, "%s", name);
    return 1;
}

static int is_name(const char *name, void *ctx) { return !strcmp(name, ((Lookup *)ctx)->name); }

int pipeline_named(const Pipeline *p, const char *name)
{
    return each_name(p->passes, is_name, &(Lookup){.name = name});
}

/* "unknown pass 'x' in --passes (bn_fold, amp, ...)": the names l->flag allows. */
static int refuse(const Lookup *l, const char *option, CtErr *err)
{
    char names[256] = "";
    size_t len = 0;
    for (int i = 0; i < l->n; i++)
        if (l->stages[i]->flags & l->flag)
            len += (size_t)snprintf(names + len, len < sizeof names ? sizeof names - len : 0, "%s%s",
                                    len ? ", " : "", l->stages[i]->name);
    return ct_fail(err, "unknown pass '%s' in %s (%s)", l->bad, option, names);
}

static int check_stages(const PassDef *const *stages, int n, const Pipeline *p, CtErr *err)
{
    Lookup l = {.stages = stages, .n = n, .flag = PASS_NAMED};
    if (each_name(p->passes, unknown, &l))
        return refuse(&l, "--passes", err);
    l.flag = PASS_DUMP;
    if (p->dump_after && unknown(p->dump_after, &l))
        return refuse(&l, "--dump-ir-after", err);
    return 0;
}

/* Whether stage s runs on a graph under p. The analyses (neither run nor
 * asked) never run here, named or not. */
static int runs(const PassDef *s, const Pipeline *p)
{
    if ((!s->run && !s->asked) || ((s->flags & PASS_EVAL_ONLY) && p->training) ||
        ((s->flags & PASS_TRAIN_ONLY) && !p->training))
        return 0;
    return (s->asked && s->asked(p)) || pipeline_named(p, s->name);
}

/* After stage s: the graph verified if asked, dumped if named. */
static int after(const PassDef *s, const Pipeline *p, const Graph *g, CtErr *err)
{
    if (p->verify && graph_verify(g, err))
        return s->run ? ct_failctx(err, "pass %s broke the graph", s->name)
                      : ct_failctx(err, "the graph at %s is broken", s->name);
    if (p->dump_after && p->dump && !strcmp(p->dump_after, s->name))
        graph_dump(g, p->dump);
    return 0;
}

int pipeline_run_stages(const PassDef *const *stages, int n, const Pipeline *p, Graph *g, PipelineResult *r,
                        CtErr *err)
{
    PipelineResult own;
    CT_ASSERT(n <= PIPELINE_MAX_STAGES);
    if (!r)
        r = &own;
    memset(r, 0, sizeof *r);
    r->ts = (TrainStep){.target = -1, .lr = -1, .loss_scale = -1, .loss = -1, .finite = -1, .grad_norm_sq = -1,
                        .ema_decay = -1};
    r->finite_out = -1;
    if (check_stages(stages, n, p, err))
        goto fail;
    for (int i = 0; i < n; i++) {
        const PassDef *s = stages[i];
        if (!runs(s, p))
            continue;
        if (s->run && s->run(p, g, r, err)) {
            ct_failctx(err, "pass %s", s->name);
            goto fail;
        }
        r->ran[r->nran++] = s->name;
        if (after(s, p, g, err))
            goto fail;
    }
    if (r == &own)
        train_step_free(&own.ts);
    return 0;
fail:
    train_step_free(&r->ts);
    graph_free(g);
    return -1;
}

/* The table as the stage list pipeline_run_stages takes. */
static void table_stages(const PassDef *stages[NTABLE])
{
    for (int i = 0; i < NTABLE; i++)
        stages[i] = &table[i];
}

int pipeline_run(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    const PassDef *stages[NTABLE];
    table_stages(stages);
    return pipeline_run_stages(stages, NTABLE, p, g, r, err);
}

int pipeline_check(const Pipeline *p, CtErr *err)
{
    const PassDef *stages[NTABLE];
    table_stages(stages);
    return check_stages(stages, NTABLE, p, err);
}
