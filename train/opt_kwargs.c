#include "train/opt_kwargs.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a key's value lands in OptimSpec. */
typedef enum {
    KW_BETAS,         /* a tuple of 2 betas (adan's 3): beta1, beta2, beta3 */
    KW_NUM,           /* a number: the double at `field` */
    KW_NUM_OR_NONE,   /* a number, or None: the int at `none_field` set instead */
    KW_BOOL,          /* True/False (or an int, Python's truthiness): the int at `field` */
    KW_NESTEROV,      /* SGD's nesterov: the kind sgd (nesterov) or momentum */
    KW_DEFAULT        /* only the class's default `dflt` (a number or a truth value) */
} KwKind;

/* One row a key: the --opt names whose timm class takes it (space
 * separated; the first row naming the optimizer wins). */
static const struct OptKwarg {
    const char *key, *opts;
    KwKind kind;
    size_t field, none_field;
    double dflt;
} kwargs[] = {
    {"betas", "adam adamw adamwlegacy nadam nadamlegacy nadamw radam adamax adopt adoptw lamb lambc adabelief lion "
              "adan adanw laprop", KW_BETAS, 0, 0, 0},
    {"eps", "adam adamw adamwlegacy nadam nadamlegacy nadamw radam adamax adopt adoptw lamb lambc lars larc rmsprop "
            "rmsproptf adabelief adagrad madgrad madgradw adan adanw laprop", KW_NUM, offsetof(OptimSpec, eps), 0, 0},
    {"nesterov", "sgd momentum sgdw", KW_NESTEROV, 0, 0, 0},
    {"nesterov", "lars larc", KW_DEFAULT, 0, 0, 0},
    {"dampening", "sgd momentum sgdw lars larc", KW_DEFAULT, 0, 0, 0},
    {"alpha", "rmsprop rmsproptf", KW_NUM, offsetof(OptimSpec, alpha), 0, 0},
    {"centered", "rmsprop rmsproptf", KW_DEFAULT, 0, 0, 0},
    {"trust_coeff", "lars larc", KW_NUM, offsetof(OptimSpec, trust_coeff), 0, 0},
    {"trust_clip", "lamb lambc lars larc", KW_BOOL, offsetof(OptimSpec, trust_clip), 0, 0},
    {"always_adapt", "lamb lambc lars larc", KW_BOOL, offsetof(OptimSpec, always_adapt), 0, 0},
    /* None: no clipping, as timm's Lamb's max_grad_norm=None */
    {"max_grad_norm", "lamb lambc", KW_NUM_OR_NONE, offsetof(OptimSpec, max_grad_norm), 0, 0},
    {"decoupled_decay", "madgrad madgradw", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0},
    {"decoupled_decay", "lamb lambc rmsproptf", KW_DEFAULT, 0, 0, 0},
    {"decoupled_decay", "adabelief", KW_DEFAULT, 0, 0, 1},
    {"decoupled", "adopt adoptw", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0},
    {"clip_exp", "adopt adoptw", KW_NUM_OR_NONE, offsetof(OptimSpec, clip_exp), offsetof(OptimSpec, no_clip), 0},
    {"no_prox", "adan adanw", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0},
    {"momentum_decay", "nadam", KW_DEFAULT, 0, 0, 4e-3},
    {"schedule_decay", "nadamlegacy", KW_DEFAULT, 0, 0, 4e-3},
    {"amsgrad", "adam adamw adamwlegacy adabelief", KW_DEFAULT, 0, 0, 0},
    /* timm's cautious masks scale by a whole-tensor mean: not an elementwise update */
    {"caution", "sgdw adamwlegacy nadamw adopt adoptw lamb lambc rmsproptf lion adan adanw laprop", KW_DEFAULT, 0, 0,
     0},
};

static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
            return 1;
    return 0;
}

/* A ParseKwargs value: None (kind 0), a truth value (1), a number (2), a
 * tuple or list of numbers (3, count in *n), anything else (-1). */
static int read_value(const char *v, double *num, int *n)
{
    while (isspace((unsigned char)*v))
        v++;
    if (!strcmp(v, "None"))
        return 0;
    if (!strcmp(v, "True") || !strcmp(v, "False"))
        return num[0] = v[0] == 'T', 1;
    char close = *v == '(' ? ')' : *v == '[' ? ']' : 0;
    const char *s = close ? v + 1 : v;
    for (*n = 0;;) {
        char *end;
        errno = 0;
        double d = strtod(s, &end);
        if (end == s || errno || *n == 3)
            return -1;
        num[(*n)++] = d;
        for (s = end; isspace((unsigned char)*s); s++)
            ;
        if (!close && !*s)
            return *n == 1 ? 2 : 3;
        if (*s == ',') /* a bare "a, b" is a tuple too */
            for (s++; isspace((unsigned char)*s); s++)
                ;
        else if (!close || *s != close)
            return -1;
        if (close ? *s == close : !*s)
            return close && s[1] ? -1 : 3;
    }
}

static int apply_one(const char *opt, const char *word, const char *key, const char *val, int adan, OptimSpec *o,
                     CtErr *err)
{
    const struct OptKwarg *r = NULL;
    for (size_t k = 0; k < sizeof kwargs / sizeof *kwargs && !r; k++)
        if (!strcmp(kwargs[k].key, key) && in_list(kwargs[k].opts, opt))
            r = &kwargs[k];
    if (!r) {
        if (!strcmp(key, "eps") || !strcmp(key, "betas"))
            return 0; /* create_optimizer_v2 drops them for an optimizer without them */
        char keys[400] = "";
        for (size_t k = 0; k < sizeof kwargs / sizeof *kwargs; k++)
            if (in_list(kwargs[k].opts, opt) && !in_list(keys, kwargs[k].key) && strlen(keys) + 40 < sizeof keys)
                strcat(strcat(keys, *keys ? " " : ""), kwargs[k].key);
        return ct_fail(err, "--opt-kwargs %s: --opt %s takes no '%s' in ctimm (its keys: %s)", word, opt, key,
                       *keys ? keys : "none");
    }
    double num[3];
    int n = 0, kind = read_value(val, num, &n);
    char *base = (char *)o;
    switch (r->kind) {
    case KW_BETAS:
        if (kind != 3 || n != (adan ? 3 : 2))
            return ct_fail(err, "--opt-kwargs %s: betas takes a tuple of %d numbers, e.g. betas='%s'", word,
                           adan ? 3 : 2, adan ? "(0.98, 0.92, 0.99)" : "(0.9, 0.999)");
        for (int k = 0; k < n; k++)
            if (!(num[k] >= 0 && num[k] < 1))
                return ct_fail(err, "--opt-kwargs %s: each beta must be in [0, 1)", word);
        o->beta1 = num[0], o->beta2 = num[1];
        if (adan)
            o->beta3 = num[2];
        return 0;
    case KW_NUM:
    case KW_NUM_OR_NONE:
        if (kind == 0 && r->kind == KW_NUM_OR_NONE) {
            if (r->none_field)
                *(int *)(void *)(base + r->none_field) = 1;
            else
                *(double *)(void *)(base + r->field) = 0;
            return 0;
        }
        if (kind != 2 || !(num[0] >= 0))
            return ct_fail(err, "--opt-kwargs %s: %s takes a number, 0 or more%s", word, key,
                           r->kind == KW_NUM_OR_NONE ? " (or None)" : "");
        *(double *)(void *)(base + r->field) = num[0];
        if (r->none_field)
            *(int *)(void *)(base + r->none_field) = 0;
        return 0;
    case KW_BOOL:
    case KW_NESTEROV:
        if (kind != 1 && !(kind == 2 && num[0] == (int)num[0]))
            return ct_fail(err, "--opt-kwargs %s: %s takes True or False", word, key);
        if (r->kind == KW_BOOL)
            *(int *)(void *)(base + r->field) = num[0] != 0;
        else
            o->kind = num[0] != 0 ? CT_OPT_SGD : CT_OPT_MOMENTUM;
        return 0;
    case KW_DEFAULT:
        if ((kind == 1 || kind == 2) && num[0] == r->dflt)
            return 0;
        return ct_fail(err, "--opt-kwargs %s: ctimm implements --opt %s with %s=%g only (timm's default)", word, opt,
                       key, r->dflt);
    }
    return 0;
}

int opt_kwargs_apply(const char *opt, const char *const *kv, int n, int eps_given, int betas_given, OptimSpec *o,
                     CtErr *err)
{
    static const struct {
        const char *key, *flag;
    } passed[] = {{"lr", "--lr"}, {"weight_decay", "--weight-decay"}, {"momentum", "--momentum"}, {"opt", "--opt"},
                  {"eps", "--opt-eps"}, {"betas", "--opt-betas"}};
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(kv[i], '=');
        char key[64];
        if (!eq || eq == kv[i] || eq - kv[i] >= (long)sizeof key)
            return ct_fail(err, "--opt-kwargs %s: expected KEY=VALUE", kv[i]);
        snprintf(key, sizeof key, "%.*s", (int)(eq - kv[i]), kv[i]);
        for (size_t k = 0; k < sizeof passed / sizeof *passed; k++)
            if (!strcmp(key, passed[k].key) && (k < 4 || (k == 4 ? eps_given : betas_given)))
                return ct_fail(err, "--opt-kwargs %s: train.py passes %s to create_optimizer_v2 itself (%s); timm "
                               "stops with 'got multiple values for keyword argument'", kv[i], key, passed[k].flag);
        if (apply_one(opt, kv[i], key, eq + 1, o->kind == CT_OPT_ADAN, o, err))
            return -1;
    }
    return 0;
}
