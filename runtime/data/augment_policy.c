/*
 * timm's augmentation policies and their config strings: RandAugment
 * ("rand-m9-n2-mstd0.5-inc1-mmax10-p0.5-tweights", rand_augment_transform,
 * with the 'weights', '3a' and '3aw' sets), AutoAugment ("original",
 * "originalr", "v0", "v0r", "3a", each with an optional "-mstd<x>",
 * auto_augment_transform) and AugMix ("augmix-m5-w4-d2-a1-b0-mstd0",
 * augment_and_mix_transform), as op tables.
 */
#include "runtime/data/augment.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct PolicyOp {
    AugOpKind kind;
    double prob;
    int magnitude;
} PolicyOp;

/* _RAND_TRANSFORMS and _RAND_INCREASING_TRANSFORMS. */
static const AugOpKind rand_ops[] = {
    AUG_AUTOCONTRAST, AUG_EQUALIZE, AUG_INVERT, AUG_ROTATE, AUG_POSTERIZE, AUG_SOLARIZE, AUG_SOLARIZE_ADD,
    AUG_COLOR, AUG_CONTRAST, AUG_BRIGHTNESS, AUG_SHARPNESS, AUG_SHEAR_X, AUG_SHEAR_Y, AUG_TRANSLATE_X_REL,
    AUG_TRANSLATE_Y_REL,
};
static const AugOpKind rand_ops_increasing[] = {
    AUG_AUTOCONTRAST, AUG_EQUALIZE, AUG_INVERT, AUG_ROTATE, AUG_POSTERIZE_INC, AUG_SOLARIZE_INC, AUG_SOLARIZE_ADD,
    AUG_COLOR_INC, AUG_CONTRAST_INC, AUG_BRIGHTNESS_INC, AUG_SHARPNESS_INC, AUG_SHEAR_X, AUG_SHEAR_Y,
    AUG_TRANSLATE_X_REL, AUG_TRANSLATE_Y_REL,
};
#define N_RAND_OPS ((int)(sizeof rand_ops / sizeof rand_ops[0]))
_Static_assert(sizeof rand_ops == sizeof rand_ops_increasing, "the two RandAugment sets pair up");

/* _RAND_WEIGHTED_0 ('tweights'), in its dict order. */
static const struct {
    AugOpKind kind;
    double weight;
} rand_weighted[] = {
    {AUG_ROTATE, 3},          {AUG_SHEAR_X, 2},           {AUG_SHEAR_Y, 2},
    {AUG_TRANSLATE_X_REL, 1}, {AUG_TRANSLATE_Y_REL, 1},   {AUG_COLOR_INC, .25},
    {AUG_SHARPNESS_INC, .25}, {AUG_AUTOCONTRAST, .25},    {AUG_SOLARIZE_INC, .05},
    {AUG_SOLARIZE_ADD, .05},  {AUG_CONTRAST_INC, .05},    {AUG_BRIGHTNESS_INC, .05},
    {AUG_EQUALIZE, .05},      {AUG_POSTERIZE_INC, .05},   {AUG_INVERT, .05},
};
#define N_RAND_WEIGHTED ((int)(sizeof rand_weighted / sizeof rand_weighted[0]))

/* _RAND_3A and _RAND_WEIGHTED_3A (DeiT III's three augmentations, plus). */
static const AugOpKind rand_3a[] = {AUG_SOLARIZE_INC, AUG_DESATURATE, AUG_GAUSSIAN_BLUR};
static const struct {
    AugOpKind kind;
    double weight;
} rand_weighted_3a[] = {
    {AUG_SOLARIZE_INC, 6},    {AUG_DESATURATE, 6},       {AUG_GAUSSIAN_BLUR, 6},     {AUG_ROTATE, 3},
    {AUG_SHEAR_X, 2},         {AUG_SHEAR_Y, 2},          {AUG_POSTERIZE_INC, 1},     {AUG_AUTOCONTRAST, 1},
    {AUG_COLOR_INC, 1},       {AUG_SHARPNESS_INC, 1},    {AUG_CONTRAST_INC, 1},      {AUG_BRIGHTNESS_INC, 1},
    {AUG_EQUALIZE, 1},        {AUG_INVERT, 1},
};

/* _AUGMIX_TRANSFORMS. */
static const AugOpKind augmix_ops[] = {
    AUG_AUTOCONTRAST, AUG_COLOR_INC, AUG_CONTRAST_INC, AUG_BRIGHTNESS_INC, AUG_SHARPNESS_INC, AUG_EQUALIZE,
    AUG_ROTATE, AUG_POSTERIZE_INC, AUG_SOLARIZE_INC, AUG_SHEAR_X, AUG_SHEAR_Y, AUG_TRANSLATE_X_REL,
    AUG_TRANSLATE_Y_REL,
};

/* auto_augment_policy_v0: 25 pairs. v0r is the same with PosterizeIncreasing. */
static const PolicyOp policy_v0[50] = {
    {AUG_EQUALIZE, 0.8, 1},     {AUG_SHEAR_Y, 0.8, 4},       {AUG_COLOR, 0.4, 9},        {AUG_EQUALIZE, 0.6, 3},
    {AUG_COLOR, 0.4, 1},        {AUG_ROTATE, 0.6, 8},        {AUG_SOLARIZE, 0.8, 3},     {AUG_EQUALIZE, 0.4, 7},
    {AUG_SOLARIZE, 0.4, 2},     {AUG_SOLARIZE, 0.6, 2},      {AUG_COLOR, 0.2, 0},        {AUG_EQUALIZE, 0.8, 8},
    {AUG_EQUALIZE, 0.4, 8},     {AUG_SOLARIZE_ADD, 0.8, 3},  {AUG_SHEAR_X, 0.2, 9},      {AUG_ROTATE, 0.6, 8},
    {AUG_COLOR, 0.6, 1},        {AUG_EQUALIZE, 1.0, 2},      {AUG_INVERT, 0.4, 9},       {AUG_ROTATE, 0.6, 0},
    {AUG_EQUALIZE, 1.0, 9},     {AUG_SHEAR_Y, 0.6, 3},       {AUG_COLOR, 0.4, 7},        {AUG_EQUALIZE, 0.6, 0},
    {AUG_POSTERIZE, 0.4, 6},    {AUG_AUTOCONTRAST, 0.4, 7},  {AUG_SOLARIZE, 0.6, 8},     {AUG_COLOR, 0.6, 9},
    {AUG_SOLARIZE, 0.2, 4},     {AUG_ROTATE, 0.8, 9},        {AUG_ROTATE, 1.0, 7},       {AUG_TRANSLATE_Y_REL, 0.8, 9},
    {AUG_SHEAR_X, 0.0, 0},      {AUG_SOLARIZE, 0.8, 4},      {AUG_SHEAR_Y, 0.8, 0},      {AUG_COLOR, 0.6, 4},
    {AUG_COLOR, 1.0, 0},        {AUG_ROTATE, 0.6, 2},        {AUG_EQUALIZE, 0.8, 4},     {AUG_EQUALIZE, 0.0, 8},
    {AUG_EQUALIZE, 1.0, 4},     {AUG_AUTOCONTRAST, 0.6, 2},  {AUG_SHEAR_Y, 0.4, 7},      {AUG_SOLARIZE_ADD, 0.6, 7},
    {AUG_POSTERIZE, 0.8, 2},    {AUG_SOLARIZE, 0.6, 10},     {AUG_SOLARIZE, 0.6, 8},     {AUG_EQUALIZE, 0.6, 1},
    {AUG_COLOR, 0.8, 6},        {AUG_ROTATE, 0.4, 5},
};

/* auto_augment_policy_3a: three one-op sub-policies. */
static const PolicyOp policy_3a[3] = {
    {AUG_SOLARIZE, 1.0, 5}, {AUG_DESATURATE, 1.0, 10}, {AUG_GAUSSIAN_BLUR_RAND, 1.0, 10},
};

/* auto_augment_policy_original (arXiv 1805.09501). originalr: PosterizeIncreasing. */
static const PolicyOp policy_original[50] = {
    {AUG_POSTERIZE_ORIG, 0.4, 8}, {AUG_ROTATE, 0.6, 9},       {AUG_SOLARIZE, 0.6, 5},     {AUG_AUTOCONTRAST, 0.6, 5},
    {AUG_EQUALIZE, 0.8, 8},       {AUG_EQUALIZE, 0.6, 3},     {AUG_POSTERIZE_ORIG, 0.6, 7}, {AUG_POSTERIZE_ORIG, 0.6, 6},
    {AUG_EQUALIZE, 0.4, 7},       {AUG_SOLARIZE, 0.2, 4},     {AUG_EQUALIZE, 0.4, 4},     {AUG_ROTATE, 0.8, 8},
    {AUG_SOLARIZE, 0.6, 3},       {AUG_EQUALIZE, 0.6, 7},     {AUG_POSTERIZE_ORIG, 0.8, 5}, {AUG_EQUALIZE, 1.0, 2},
    {AUG_ROTATE, 0.2, 3},         {AUG_SOLARIZE, 0.6, 8},     {AUG_EQUALIZE, 0.6, 8},     {AUG_POSTERIZE_ORIG, 0.4, 6},
    {AUG_ROTATE, 0.8, 8},         {AUG_COLOR, 0.4, 0},        {AUG_ROTATE, 0.4, 9},       {AUG_EQUALIZE, 0.6, 2},
    {AUG_EQUALIZE, 0.0, 7},       {AUG_EQUALIZE, 0.8, 8},     {AUG_INVERT, 0.6, 4},       {AUG_EQUALIZE, 1.0, 8},
    {AUG_COLOR, 0.6, 4},          {AUG_CONTRAST, 1.0, 8},     {AUG_ROTATE, 0.8, 8},       {AUG_COLOR, 1.0, 2},
    {AUG_COLOR, 0.8, 8},          {AUG_SOLARIZE, 0.8, 7},     {AUG_SHARPNESS, 0.4, 7},    {AUG_INVERT, 0.6, 8},
    {AUG_SHEAR_X, 0.6, 5},        {AUG_EQUALIZE, 1.0, 9},     {AUG_COLOR, 0.4, 0},        {AUG_EQUALIZE, 0.6, 3},
    {AUG_EQUALIZE, 0.4, 7},       {AUG_SOLARIZE, 0.2, 4},     {AUG_SOLARIZE, 0.6, 5},     {AUG_AUTOCONTRAST, 0.6, 5},
    {AUG_INVERT, 0.6, 4},         {AUG_EQUALIZE, 1.0, 8},     {AUG_COLOR, 0.6, 4},        {AUG_CONTRAST, 1.0, 8},
    {AUG_EQUALIZE, 0.8, 8},       {AUG_EQUALIZE, 0.6, 3},
};

/* One "-" section split as timm's re.split(r'(\d.*)', c): the key before
 * the first digit and the value from it. Returns 0 when there is no digit
 * (timm skips such sections). */
static int split_section(const char *s, size_t len, char *key, size_t keycap, char *val, size_t valcap)
{
    size_t i = 0;
    while (i < len && !(s[i] >= '0' && s[i] <= '9'))
        i++;
    if (i == len || i >= keycap || len - i >= valcap)
        return 0;
    memcpy(key, s, i);
    key[i] = 0;
    memcpy(val, s + i, len - i);
    val[len - i] = 0;
    return 1;
}

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    return *end == 0 && errno == 0;
}

static int parse_int(const char *v, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end != 0 || errno || x < -1000000 || x > 1000000)
        return 0;
    *out = (int)x;
    return 1;
}

static int parse_rand(const char *spec, AugPolicy *p, CtErr *err)
{
    int magnitude = 10, increasing = 0, have_mstd = 0, have_mmax = 0, have_t = 0;
    double prob = 0.5;
    char tname[32] = "";
    p->kind = AUG_RAND;
    p->num_layers = 2;
    const char *s = spec + 4; /* past "rand" */
    while (*s == '-') {
        s++;
        size_t len = strcspn(s, "-");
        char key[32], val[64];
        if (len > 0 && s[0] == 't') {
            if (!have_t) {
                if (len - 1 >= sizeof tname)
                    return ct_fail(err, "auto_augment '%s': transform set name too long", spec);
                memcpy(tname, s + 1, len - 1);
                tname[len - 1] = 0;
                have_t = 1;
            }
        } else if (split_section(s, len, key, sizeof key, val, sizeof val)) {
            double d;
            int ok = 1;
            if (!strcmp(key, "mstd")) {
                ok = parse_double(val, &d);
                if (ok && !have_mstd)
                    p->magnitude_std = d > 100 ? INFINITY : d, have_mstd = 1;
            } else if (!strcmp(key, "mmax")) {
                int v;
                ok = parse_int(val, &v);
                if (ok && !have_mmax)
                    p->magnitude_max = v ? v : 10, have_mmax = 1; /* timm: magnitude_max or 10 */
            } else if (!strcmp(key, "inc")) {
                ok = parse_int(val, &increasing);
            } else if (!strcmp(key, "m")) {
                ok = parse_int(val, &magnitude);
            } else if (!strcmp(key, "n")) {
                ok = parse_int(val, &p->num_layers);
            } else if (!strcmp(key, "p")) {
                ok = parse_double(val, &prob);
            } else {
                return ct_fail(err, "auto_augment '%s': unknown RandAugment section '%.*s' (known: m, n, p, mstd, "
                               "mmax, inc, t)", spec, (int)len, s);
            }
            if (!ok)
                return ct_fail(err, "auto_augment '%s': bad value in section '%.*s'", spec, (int)len, s);
        }
        s += len;
    }
    if (p->num_layers < 0)
        return ct_fail(err, "auto_augment '%s': negative number of layers", spec);
    int w3 = !strcmp(tname, "3aw");
    if (w3 || !strcmp(tname, "weights")) {
        int n = w3 ? (int)(sizeof rand_weighted_3a / sizeof rand_weighted_3a[0]) : N_RAND_WEIGHTED;
        if (p->num_layers > n)
            return ct_fail(err, "auto_augment '%s': %d layers drawn without replacement from %d ops", spec,
                           p->num_layers, n);
        p->weighted = 1;
        p->n_ops = n;
        for (int i = 0; i < n; i++) {
            AugOpKind k = w3 ? rand_weighted_3a[i].kind : rand_weighted[i].kind;
            p->ops[i] = (AugOp){.kind = (uint8_t)k, .prob = prob, .magnitude = magnitude};
            p->weights[i] = w3 ? rand_weighted_3a[i].weight : rand_weighted[i].weight;
        }
        return 0;
    }
    if (!strcmp(tname, "3a")) {
        p->n_ops = (int)(sizeof rand_3a / sizeof rand_3a[0]);
        for (int i = 0; i < p->n_ops; i++)
            p->ops[i] = (AugOp){.kind = (uint8_t)rand_3a[i], .prob = prob, .magnitude = magnitude};
        return 0;
    }
    /* any other name falls back to the default set, as rand_augment_choices does */
    p->n_ops = N_RAND_OPS;
    for (int i = 0; i < N_RAND_OPS; i++)
        p->ops[i] = (AugOp){.kind = (uint8_t)(increasing ? rand_ops_increasing[i] : rand_ops[i]), .prob = prob,
                            .magnitude = magnitude};
    return 0;
}

static int parse_auto(const char *spec, AugPolicy *p, CtErr *err)
{
    size_t nlen = strcspn(spec, "-");
    const PolicyOp *table;
    int research = 0, n_ops = 50;
    p->sub_len = 2;
    if (nlen == 2 && !strncmp(spec, "3a", 2))
        table = policy_3a, n_ops = 3, p->sub_len = 1;
    else if (nlen == 2 && !strncmp(spec, "v0", 2))
        table = policy_v0;
    else if (nlen == 3 && !strncmp(spec, "v0r", 3))
        table = policy_v0, research = 1;
    else if (nlen == 8 && !strncmp(spec, "original", 8))
        table = policy_original;
    else if (nlen == 9 && !strncmp(spec, "originalr", 9))
        table = policy_original, research = 1;
    else
        return ct_fail(err, "auto_augment '%s': unknown policy '%.*s' (supported: rand-..., augmix-..., original, "
                       "originalr, v0, v0r, 3a)", spec, (int)nlen, spec);
    p->kind = AUG_AUTO;
    p->n_ops = n_ops;
    for (int i = 0; i < n_ops; i++) {
        AugOpKind k = table[i].kind;
        if (research && (k == AUG_POSTERIZE || k == AUG_POSTERIZE_ORIG))
            k = AUG_POSTERIZE_INC;
        p->ops[i] = (AugOp){.kind = (uint8_t)k, .prob = table[i].prob, .magnitude = table[i].magnitude};
    }
    const char *s = spec + nlen;
    int have_mstd = 0;
    while (*s == '-') {
        s++;
        size_t len = strcspn(s, "-");
        char key[32], val[64];
        if (split_section(s, len, key, sizeof key, val, sizeof val)) {
            double d;
            if (strcmp(key, "mstd"))
                return ct_fail(err, "auto_augment '%s': unknown AutoAugment section '%.*s' (known: mstd)", spec,
                               (int)len, s);
            if (!parse_double(val, &d))
                return ct_fail(err, "auto_augment '%s': bad value in section '%.*s'", spec, (int)len, s);
            if (!have_mstd)
                p->magnitude_std = d, have_mstd = 1;
        }
        s += len;
    }
    return 0;
}

static int parse_augmix(const char *spec, AugPolicy *p, CtErr *err)
{
    int magnitude = 3, have_mstd = 0;
    p->kind = AUG_MIX;
    p->width = 3;
    p->depth = -1;
    p->alpha = 1;
    const char *s = spec + 6; /* past "augmix" */
    while (*s == '-') {
        s++;
        size_t len = strcspn(s, "-");
        char key[32], val[64];
        if (split_section(s, len, key, sizeof key, val, sizeof val)) {
            double d;
            int v = 0, ok;
            if (!strcmp(key, "mstd")) {
                ok = parse_double(val, &d);
                if (ok && !have_mstd)
                    p->magnitude_std = d, have_mstd = 1; /* hparams.setdefault: the first one holds */
            } else if (!strcmp(key, "a")) {
                ok = parse_double(val, &p->alpha);
            } else if (!strcmp(key, "m")) {
                ok = parse_int(val, &magnitude);
            } else if (!strcmp(key, "w")) {
                ok = parse_int(val, &p->width);
            } else if (!strcmp(key, "d")) {
                ok = parse_int(val, &p->depth);
            } else if (!strcmp(key, "b")) {
                ok = parse_int(val, &v);
                p->blended = v != 0;
            } else {
                return ct_fail(err, "auto_augment '%s': unknown AugMix section '%.*s' (known: m, w, d, a, b, mstd)",
                               spec, (int)len, s);
            }
            if (!ok)
                return ct_fail(err, "auto_augment '%s': bad value in section '%.*s'", spec, (int)len, s);
        }
        s += len;
    }
    if (!have_mstd)
        p->magnitude_std = INFINITY; /* augment_and_mix_transform's default: uniform in [0, m] */
    /* numpy's dirichlet and beta refuse these; timm would fail on the first image */
    if (p->width < 1 || p->width > AUG_MAX_OPS)
        return ct_fail(err, "auto_augment '%s': width %d, needs 1..%d chains", spec, p->width, AUG_MAX_OPS);
    if (!(p->alpha > 0 && isfinite(p->alpha)))
        return ct_fail(err, "auto_augment '%s': alpha %g, needs > 0", spec, p->alpha);
    p->n_ops = (int)(sizeof augmix_ops / sizeof augmix_ops[0]);
    for (int i = 0; i < p->n_ops; i++)
        p->ops[i] = (AugOp){.kind = (uint8_t)augmix_ops[i], .prob = 1.0, .magnitude = magnitude};
    return 0;
}

int aug_parse(const char *spec, AugPolicy *p, CtErr *err)
{
    memset(p, 0, sizeof *p);
    p->magnitude_max = 10;
    if (!spec || !*spec)
        return ct_fail(err, "auto_augment: empty policy string");
    if (!strncmp(spec, "augmix", 6) && (spec[6] == 0 || spec[6] == '-'))
        return parse_augmix(spec, p, err);
    if (!strncmp(spec, "rand", 4) && (spec[4] == 0 || spec[4] == '-'))
        return parse_rand(spec, p, err);
    return parse_auto(spec, p, err);
}
