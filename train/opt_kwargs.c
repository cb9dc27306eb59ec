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
    KW_DEFAULT,       /* only the class's default `dflt` (a number or a truth value) */
    KW_REAL,          /* any number, negative too: the double at `field` */
    KW_INT,           /* a whole number, 0 or more: the int at `field` */
    KW_CHOICE,        /* one of the words `choices` ('|' separated; None among them as "None"): its index, an int */
    KW_NO_EFFECT      /* any value: what it sets does nothing where an lr is given (timm's Adafactor) */
} KwKind;

/* One row a key: the --opt names whose timm class takes it (space
 * separated; the first row naming the optimizer wins). */
static const struct OptKwarg {
    const char *key, *opts;
    KwKind kind;
    size_t field, none_field;
    double dflt;
    const char *choices;
} kwargs[] = {
    {"betas", "adam adamw adamwlegacy cadamw adamc cadamc nadam nadamlegacy nadamw cnadamw nadamc cnadamc radam adamax "
              "adopt cadopt adoptw cadoptw adoptc cadoptc lamb lambc lambw lambcw lambcd adabelief lion clion lionc "
              "clionc adan adanw cadan cadanw laprop lapropc claprop adamp muon adafactor",
     KW_BETAS, 0, 0, 0, NULL},
    /* None: timm's Adafactorbv's 1e-30 */
    {"eps", "adafactorbv adafactorbvc", KW_NUM_OR_NONE, offsetof(OptimSpec, eps), 0, 0, NULL},
    {"eps", "adam adamw adamwlegacy cadamw adamc cadamc nadam nadamlegacy nadamw cnadamw nadamc cnadamc radam adamax "
            "adopt cadopt adoptw cadoptw adoptc cadoptc lamb lambc lambw lambcw lambcd lars larc nlars nlarc rmsprop "
            "rmsproptf crmsproptf rmsproptfc adabelief adagrad madgrad madgradw adan adanw cadan cadanw laprop lapropc "
            "claprop sgdp adamp adafactor muon",
     KW_NUM, offsetof(OptimSpec, eps), 0, 0, NULL},
    {"nesterov", "sgd momentum sgdw csgdw sgdc csgdc", KW_NESTEROV, 0, 0, 0, NULL},
    {"nesterov", "sgdp adamp lars larc nlars nlarc", KW_BOOL, offsetof(OptimSpec, nesterov), 0, 0, NULL},
    /* True's AdamW fallback is timm's NAdamW-style one, not built */
    {"nesterov", "muon", KW_DEFAULT, 0, 0, 0, NULL},
    {"delta", "sgdp adamp", KW_NUM, offsetof(OptimSpec, delta), 0, 0, NULL},
    {"wd_ratio", "sgdp adamp", KW_NUM, offsetof(OptimSpec, wd_ratio), 0, 0, NULL},
    {"dampening", "sgdp", KW_DEFAULT, 0, 0, 0, NULL},
    {"clip_threshold", "adafactor", KW_NUM, offsetof(OptimSpec, clip_threshold), 0, 0, NULL},
    {"clipping_threshold", "adafactorbv adafactorbvc", KW_NUM_OR_NONE, offsetof(OptimSpec, clip_threshold), 0, 0,
     NULL},
    {"decay_rate", "adafactor adafactorbv adafactorbvc", KW_REAL, offsetof(OptimSpec, decay_rate), 0, 0, NULL},
    {"min_dim_size_to_factor", "adafactor adafactorbv adafactorbvc", KW_INT,
     offsetof(OptimSpec, min_dim_size_to_factor), 0, 0, NULL},
    {"eps_scale", "adafactor", KW_NO_EFFECT, 0, 0, 0, NULL},
    {"scale_parameter", "adafactor", KW_NO_EFFECT, 0, 0, 0, NULL},
    {"warmup_init", "adafactor", KW_DEFAULT, 0, 0, 0, NULL},
    {"beta2_cap", "adafactorbv adafactorbvc", KW_NUM, offsetof(OptimSpec, beta2_cap), 0, 0, NULL},
    {"decay_offset", "adafactorbv adafactorbvc", KW_INT, offsetof(OptimSpec, decay_offset), 0, 0, NULL},
    {"unscaled_wd", "adafactorbv adafactorbvc", KW_BOOL, offsetof(OptimSpec, unscaled_wd), 0, 0, NULL},
    {"momentum_dtype", "adafactorbv adafactorbvc", KW_CHOICE, offsetof(OptimSpec, momentum_f32), 0, 0,
     "bfloat16|float32"},
    {"ns_steps", "muon", KW_INT, offsetof(OptimSpec, ns_steps), 0, 0, NULL},
    {"ns_coefficients", "muon", KW_CHOICE, offsetof(OptimSpec, ns_preset), 0, 0,
     "original|quintic|polar_express|polar_express_safer"},
    {"safety_factor", "muon", KW_NUM, offsetof(OptimSpec, safety_factor), 0, 0, NULL},
    {"adjust_lr_fn", "muon", KW_CHOICE, offsetof(OptimSpec, adjust_lr), 0, 0, "None|original|match_rms_adamw|rms_to_rms"},
    {"fallback_lr_scale", "muon", KW_NUM, offsetof(OptimSpec, fallback_lr_scale), 0, 0, NULL},
    {"conv_mode", "muon", KW_CHOICE, 0, 0, 0, "flatten"},
    {"dampening", "sgd momentum sgdw csgdw sgdc csgdc lars larc nlars nlarc", KW_DEFAULT, 0, 0, 0, NULL},
    {"alpha", "rmsprop rmsproptf crmsproptf rmsproptfc", KW_NUM, offsetof(OptimSpec, alpha), 0, 0, NULL},
    {"centered", "rmsprop rmsproptf crmsproptf rmsproptfc", KW_DEFAULT, 0, 0, 0, NULL},
    {"trust_coeff", "lars larc nlars nlarc", KW_NUM, offsetof(OptimSpec, trust_coeff), 0, 0, NULL},
    {"trust_clip", "lamb lambc lambw lambcw lambcd lars larc nlars nlarc", KW_BOOL, offsetof(OptimSpec, trust_clip), 0,
     0, NULL},
    {"always_adapt", "lamb lambc lambw lambcw lambcd lars larc nlars nlarc", KW_BOOL,
     offsetof(OptimSpec, always_adapt), 0, 0, NULL},
    /* None: no clipping, as timm's Lamb's max_grad_norm=None */
    {"max_grad_norm", "lamb lambc lambw lambcw lambcd", KW_NUM_OR_NONE, offsetof(OptimSpec, max_grad_norm), 0, 0, NULL},
    {"decoupled_decay", "madgrad madgradw", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0, NULL},
    {"decoupled_decay", "lamb lambc lambw lambcw lambcd", KW_BOOL, offsetof(OptimSpec, decoupled_decay), 0, 0, NULL},
    {"decoupled_decay", "rmsproptf crmsproptf rmsproptfc", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0, NULL},
    {"decoupled_decay", "adabelief", KW_DEFAULT, 0, 0, 1, NULL},
    {"decoupled", "adopt cadopt adoptw cadoptw adoptc cadoptc", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0, NULL},
    {"clip_exp", "adopt cadopt adoptw cadoptw adoptc cadoptc",
     KW_NUM_OR_NONE, offsetof(OptimSpec, clip_exp), offsetof(OptimSpec, no_clip), 0,
     NULL},
    {"no_prox", "adan adanw cadan cadanw", KW_BOOL, offsetof(OptimSpec, decoupled), 0, 0, NULL},
    {"momentum_decay", "nadam", KW_DEFAULT, 0, 0, 4e-3, NULL},
    {"schedule_decay", "nadamlegacy", KW_DEFAULT, 0, 0, 4e-3, NULL},
    {"amsgrad", "adam adamw adamwlegacy cadamw adamc cadamc adabelief", KW_DEFAULT, 0, 0, 0, NULL},
    {"corrected_weight_decay", "sgdw csgdw sgdc csgdc adamwlegacy cadamw adamc cadamc nadamw cnadamw nadamc cnadamc "
                               "adopt cadopt adoptw cadoptw adoptc cadoptc lamb lambc lambw lambcw lambcd rmsproptf "
                               "crmsproptf rmsproptfc lion clion lionc clionc laprop lapropc claprop adafactorbv "
                               "adafactorbvc",
     KW_BOOL, offsetof(OptimSpec, corrected), 0, 0, NULL},
    {"caution", "adamwlegacy adamc nadamw nadamc adopt adoptw adoptc lion lionc cadamw cadamc cnadamw cnadamc cadopt "
                "cadoptw cadoptc clion clionc sgdw sgdc rmsproptf rmsproptfc csgdw csgdc crmsproptf adan adanw cadan "
                "cadanw laprop lapropc claprop",
     KW_BOOL, offsetof(OptimSpec, caution), 0, 0, NULL},
    /* not built: these compute norms before the update, which the mask would have to go into */
    {"caution", "lamb lambc lambw lambcw lambcd sgdp adamp adafactor adafactorbv adafactorbvc", KW_DEFAULT, 0, 0, 0,
     NULL},
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
        if (kind == 0 && o->kind == CT_OPT_ADAFACTOR) { /* timm's None: no first moment */
            o->beta1 = 0;
            return 0;
        }
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
    case KW_REAL:
        if (kind != 2)
            return ct_fail(err, "--opt-kwargs %s: %s takes a number", word, key);
        *(double *)(void *)(base + r->field) = num[0];
        return 0;
    case KW_INT:
        if (kind != 2 || num[0] != (int)num[0] || num[0] < 0 || num[0] > 1 << 20)
            return ct_fail(err, "--opt-kwargs %s: %s takes a whole number, 0 or more", word, key);
        *(int *)(void *)(base + r->field) = (int)num[0];
        return 0;
    case KW_CHOICE: {
        /* ParseKwargs leaves a word literal_eval cannot read as the string */
        size_t len = strlen(val);
        if (len >= 2 && (val[0] == '\'' || val[0] == '"') && val[len - 1] == val[0])
            val++, len -= 2;
        int idx = 0;
        for (const char *c = r->choices; *c; idx++) {
            size_t w = strcspn(c, "|");
            if (w == len && !strncmp(c, val, len)) {
                if (r->field)
                    *(int *)(void *)(base + r->field) = idx;
                return 0;
            }
            c += w + (c[w] == '|');
        }
        return ct_fail(err, "--opt-kwargs %s: %s takes one of %s", word, key, r->choices);
    }
    case KW_NO_EFFECT:
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
