#include "train/model_kwargs.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

const ScriptKwarg train_py_model_kwargs[] = {
    {"pretrained", "--pretrained"}, {"in_chans", "--in-chans"}, {"num_classes", "--num-classes"},
    {"drop_rate", "--drop"}, {"drop_path_rate", "--drop-path"}, {"drop_block_rate", "--drop-block"},
    {"global_pool", "--gp"}, {"bn_momentum", "--bn-momentum"}, {"bn_eps", "--bn-eps"},
    {"scriptable", "--torchscript"}, {"checkpoint_path", "--initial-checkpoint"}, {NULL, NULL}};

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

int model_kwargs_parse(const char *const *kv, int n, const ScriptKwarg *passed, const char *script, int *img_size,
                       CtErr *err)
{
    *img_size = 0;
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(kv[i], '=');
        if (!eq || eq == kv[i])
            return ct_fail(err, "--model-kwargs %s: expected KEY=VALUE", kv[i]);
        int klen = (int)(eq - kv[i]);
        for (const ScriptKwarg *p = passed; p->key; p++)
            if ((int)strlen(p->key) == klen && !strncmp(kv[i], p->key, (size_t)klen))
                return ct_fail(err, "--model-kwargs %s: %s passes %s to create_model itself (%s); timm stops with "
                               "'got multiple values for keyword argument'", kv[i], script, p->key, p->flag);
        if (klen != 8 || strncmp(kv[i], "img_size", 8))
            return ct_fail(err, "--model-kwargs %s: ctimm's models have no option '%.*s' (of timm's model options "
                           "they take img_size)", kv[i], klen, kv[i]);
        if (parse_img_size(eq + 1, img_size))
            return ct_fail(err, "--model-kwargs %s: img_size is a whole number of pixels (or a pair of one twice)",
                           kv[i]);
    }
    return 0;
}

int model_kwargs_check(const ModelEntry *m, int img_size, int data_img, CtErr *err)
{
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
