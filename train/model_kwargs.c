#include "train/model_kwargs.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ScriptKwarg train_py_model_kwargs[] = {
    {"pretrained", "--pretrained"}, {"in_chans", "--in-chans"}, {"num_classes", "--num-classes"},
    {"drop_rate", "--drop"}, {"drop_path_rate", "--drop-path"}, {"drop_block_rate", "--drop-block"},
    {"global_pool", "--gp"}, {"bn_momentum", "--bn-momentum"}, {"bn_eps", "--bn-eps"},
    {"scriptable", "--torchscript"}, {"checkpoint_path", "--initial-checkpoint"}, {NULL, NULL}};

const ScriptKwarg validate_py_model_kwargs[] = {
    {"pretrained", "--pretrained"}, {"num_classes", "--num-classes"}, {"in_chans", "--in-chans"},
    {"global_pool", "--gp"}, {"scriptable", "--torchscript"}, {NULL, NULL}};

/* benchmark.py's in_chans is always 3 (ctimm-bench's --in-chans is its own) */
const ScriptKwarg benchmark_py_model_kwargs[] = {
    {"num_classes", "--num-classes"}, {"in_chans", "in_chans=3"}, {"global_pool", "--gp"},
    {"scriptable", "--torchscript"}, {"drop_rate", "--drop"}, {"drop_path_rate", "--drop-path"},
    {"drop_block_rate", "--drop-block"}, {NULL, NULL}};

/* A whole positive int at *s, moving *s past it and the blanks after. */
static int read_int(const char **s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(*s, &end, 10);
    if (end == *s || errno || v <= 0 || v > 1 << 20)
        return -1;
    *out = (int)v;
    for (*s = end; isspace((unsigned char)**s); ++*s)
        ;
    return 0;
}

/* img_size's literal: an int, or a pair of one int twice ((224, 224), [224, 224]): square inputs only. */
static int parse_img_size(const char *v, int *out)
{
    while (isspace((unsigned char)*v))
        v++;
    char close = *v == '(' ? ')' : *v == '[' ? ']' : 0;
    if (!close)
        return read_int(&v, out) || *v ? -1 : 0;
    int h, w;
    v++;
    while (isspace((unsigned char)*v))
        v++;
    if (read_int(&v, &h) || *v++ != ',')
        return -1;
    while (isspace((unsigned char)*v))
        v++;
    if (read_int(&v, &w) || *v++ != close || *v || h != w)
        return -1;
    *out = h;
    return 0;
}

/* A Python literal as ast.literal_eval reads it, of the kinds an option takes. */
typedef enum { LIT_NONE, LIT_BOOL, LIT_INT, LIT_FLOAT, LIT_STR } LitKind;
typedef struct Lit {
    LitKind kind;
    double num;     /* BOOL, INT, FLOAT */
    const char *s;  /* STR: its text, len bytes */
    int len;
} Lit;

/* ParseKwargs' value: a literal, else the word itself as a string. */
static Lit read_literal(const char *v)
{
    size_t n = strlen(v);
    if (!strcmp(v, "None"))
        return (Lit){.kind = LIT_NONE};
    if (!strcmp(v, "True") || !strcmp(v, "False"))
        return (Lit){.kind = LIT_BOOL, .num = v[0] == 'T'};
    if (n >= 2 && (v[0] == '\'' || v[0] == '"') && v[n - 1] == v[0] && !memchr(v + 1, v[0], n - 2) &&
        !memchr(v + 1, '\\', n - 2))
        return (Lit){LIT_STR, 0, v + 1, (int)n - 2};
    if (n && strspn(v, "0123456789+-.eE") == n) {
        char *end;
        errno = 0;
        long i = strtol(v, &end, 10);
        if (!*end && !errno)
            return (Lit){.kind = LIT_INT, .num = (double)i};
        double d = strtod(v, &end);
        if (!*end && !errno)
            return (Lit){.kind = LIT_FLOAT, .num = d};
    }
    return (Lit){LIT_STR, 0, v, (int)n};
}

/* A key's option: a's field set from the literal, or a refusal naming what it takes. */
static int set_option(const char *word, int klen, Lit l, ModelArgs *a, CtErr *err)
{
    static const struct {
        const char *key;
        unsigned bit;
        LitKind kind; /* LIT_BOOL: a truth value (True/False, or an int as Python's truthiness) */
    } opts[] = {{"global_pool", MODEL_OPT_GLOBAL_POOL, LIT_STR},  {"class_token", MODEL_OPT_CLASS_TOKEN, LIT_BOOL},
                {"reg_tokens", MODEL_OPT_REG_TOKENS, LIT_INT},    {"fc_norm", MODEL_OPT_FC_NORM, LIT_BOOL},
                {"no_embed_class", MODEL_OPT_NO_EMBED_CLASS, LIT_BOOL},
                {"init_values", MODEL_OPT_INIT_VALUES, LIT_FLOAT}, {"qkv_bias", MODEL_OPT_QKV_BIAS, LIT_BOOL},
                {"bn_momentum", MODEL_OPT_BN_MOMENTUM, LIT_FLOAT}, {"bn_eps", MODEL_OPT_BN_EPS, LIT_FLOAT}};
    for (int k = 0; k < (int)(sizeof opts / sizeof *opts); k++) {
        if ((int)strlen(opts[k].key) != klen || strncmp(word, opts[k].key, (size_t)klen))
            continue;
        if (l.kind == LIT_NONE) /* create_model drops None: the model's own value */
            return 0;
        int ok = opts[k].kind == LIT_STR     ? l.kind == LIT_STR
                 : opts[k].kind == LIT_FLOAT ? l.kind == LIT_INT || l.kind == LIT_FLOAT
                 : opts[k].kind == LIT_INT   ? l.kind == LIT_INT && l.num >= 0 && l.num <= 1024
                                             : l.kind == LIT_BOOL || l.kind == LIT_INT;
        if (!ok)
            return ct_fail(err, "--model-kwargs %s: %.*s takes %s", word, klen, word,
                           opts[k].kind == LIT_STR     ? "a pool type ('token', 'avg', 'map')"
                           : opts[k].kind == LIT_FLOAT ? "a number (or None)"
                           : opts[k].kind == LIT_INT   ? "a count of tokens, 0 or more"
                                                       : "True or False");
        a->opt.set |= opts[k].bit;
        switch (opts[k].bit) {
        case MODEL_OPT_GLOBAL_POOL:
            if (l.len >= (int)sizeof a->opt.global_pool)
                return ct_fail(err, "--model-kwargs %s: global_pool takes a pool type ('token', 'avg', 'map')", word);
            snprintf(a->opt.global_pool, sizeof a->opt.global_pool, "%.*s", l.len, l.s);
            break;
        case MODEL_OPT_CLASS_TOKEN: a->opt.class_token = l.num != 0; break;
        case MODEL_OPT_REG_TOKENS: a->opt.reg_tokens = (int)l.num; break;
        case MODEL_OPT_FC_NORM: a->opt.fc_norm = l.num != 0; break;
        case MODEL_OPT_NO_EMBED_CLASS: a->opt.no_embed_class = l.num != 0; break;
        case MODEL_OPT_INIT_VALUES: a->opt.init_values = l.num; break;
        case MODEL_OPT_BN_MOMENTUM: /* 0 would be BNOpts' "default" and freeze the statistics in torch */
            if (!(l.num > 0 && l.num <= 1))
                return ct_fail(err, "--model-kwargs %s: bn_momentum must be in (0, 1]", word);
            a->opt.bn_momentum = l.num;
            break;
        case MODEL_OPT_BN_EPS:
            if (!(l.num > 0))
                return ct_fail(err, "--model-kwargs %s: bn_eps must be > 0", word);
            a->opt.bn_eps = l.num;
            break;
        default: a->opt.qkv_bias = l.num != 0; break;
        }
        return 0;
    }
    return ct_fail(err, "--model-kwargs %s: ctimm's models have no option '%.*s' (of timm's model options they "
                   "take img_size, global_pool, class_token, reg_tokens, fc_norm, no_embed_class, init_values, "
                   "qkv_bias, bn_momentum and bn_eps)", word, klen, word);
}

int model_kwargs_parse(const char *const *kv, int n, const ScriptKwarg *passed, const char *script, ModelArgs *a,
                       CtErr *err)
{
    a->img_size = 0;
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(kv[i], '=');
        if (!eq || eq == kv[i])
            return ct_fail(err, "--model-kwargs %s: expected KEY=VALUE", kv[i]);
        int klen = (int)(eq - kv[i]);
        for (const ScriptKwarg *p = passed; p->key; p++)
            if ((int)strlen(p->key) == klen && !strncmp(kv[i], p->key, (size_t)klen))
                return ct_fail(err, "--model-kwargs %s: %s passes %s to create_model itself (%s); timm stops with "
                               "'got multiple values for keyword argument'", kv[i], script, p->key, p->flag);
        if (klen != 8 || strncmp(kv[i], "img_size", 8)) {
            if (set_option(kv[i], klen, read_literal(eq + 1), a, err))
                return -1;
        } else if (strcmp(eq + 1, "None") && parse_img_size(eq + 1, &a->img_size))
            return ct_fail(err, "--model-kwargs %s: img_size is a whole number of pixels (or a pair of one twice)",
                           kv[i]);
    }
    return 0;
}

int model_kwargs_gp(const char *gp, ModelArgs *a, CtErr *err)
{
    if (!gp)
        return 0;
    if (strlen(gp) >= sizeof a->opt.global_pool)
        return ct_fail(err, "--gp %s: not a pool type ('token', 'avg', 'map')", gp);
    a->opt.set |= MODEL_OPT_GLOBAL_POOL;
    snprintf(a->opt.global_pool, sizeof a->opt.global_pool, "%s", gp);
    return 0;
}

int model_kwargs_check(const ModelEntry *m, const ModelArgs *a, int data_img, CtErr *err)
{
    if (model_args_check(m, a, err))
        return -1;
    int img_size = a->img_size;
    if (!img_size)
        return 0;
    if (!m->cfg.fixed_input_size)
        return ct_fail(err, "--model-kwargs img_size=%d: %s takes any input size and no img_size option (timm "
                       "raises TypeError: unexpected keyword argument 'img_size')", img_size, m->name);
    if (img_size != data_img)
        return ct_fail(err, "--model-kwargs img_size=%d builds %s for %d px but the data is %d px; give "
                       "--img-size %d too (its patch embedding takes no other size)", img_size, m->name, img_size,
                       data_img, img_size);
    return 0;
}
