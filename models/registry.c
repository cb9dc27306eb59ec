#include "models/registry.h"

#include "models/layer_groups.h"

#include <stdlib.h>
#include <string.h>

static const ModelFamily *const families[] = {&resnet_family, &vit_family, &convnext_family, &efficientnet_family,
                                              &mobilenetv3_family, &regnet_family, &metaformer_family,
                                              &resnetv2_family, &nfnet_family, &byobnet_family, &hgnet_family,
                                              &eva_family, &swin_family, &beit_family, &vit_relpos_family,
                                              &levit_family, &swinv2_family, &swinv2_cr_family, &maxxvit_family};
enum { NFAMILIES = sizeof families / sizeof families[0] };

const ModelEntry *model_find(const char *name)
{
    size_t n = strcspn(name, ".");
    for (int f = 0; f < NFAMILIES; f++)
        for (int i = 0; i < families[f]->n; i++)
            if (strlen(families[f]->entries[i].name) == n && strncmp(families[f]->entries[i].name, name, n) == 0)
                return &families[f]->entries[i];
    return NULL;
}

const ModelFamily *model_family(const ModelEntry *m)
{
    for (int f = 0; f < NFAMILIES; f++)
        for (int i = 0; i < families[f]->n; i++)
            if (!strcmp(families[f]->entries[i].name, m->name))
                return families[f];
    CT_ASSERT(!"a registered model");
    return NULL;
}

const char *model_tag(const char *name)
{
    const char *dot = strchr(name, '.');
    return dot ? dot + 1 : NULL;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const ModelEntry *const *)a)->name, (*(const ModelEntry *const *)b)->name);
}

int model_list(const char *filter, void (*fn)(const ModelEntry *m, void *ctx), void *ctx)
{
    const ModelEntry *all[256];
    int n = 0;
    for (int f = 0; f < NFAMILIES; f++)
        for (int i = 0; i < families[f]->n && n < 256; i++)
            if (!filter || strstr(families[f]->entries[i].name, filter))
                all[n++] = &families[f]->entries[i];
    qsort(all, (size_t)n, sizeof all[0], by_name);
    for (int i = 0; i < n; i++)
        fn(all[i], ctx);
    return n;
}

static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127)
        return 1 << 20;
    int prev[128], cur[128];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[lb];
}

int model_suggest(const char *name, const char **out, int max)
{
    const char *cand[256];
    int dist[256], n = 0, taken = 0;
    for (int f = 0; f < NFAMILIES; f++)
        for (int i = 0; i < families[f]->n && n < 256; i++) {
            cand[n] = families[f]->entries[i].name;
            /* A name that contains the query ("vit_base") is as close as a typo. */
            dist[n] = strstr(cand[n], name) ? 1 : edit_distance(name, cand[n]);
            n++;
        }
    while (taken < max && taken < n) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (dist[i] >= 0 && (best < 0 || dist[i] < dist[best] ||
                                 (dist[i] == dist[best] && strcmp(cand[i], cand[best]) < 0)))
                best = i;
        out[taken++] = cand[best];
        dist[best] = -1;
    }
    return taken;
}

int model_img_size(const ModelEntry *m, const ModelArgs *a)
{
    return a->img_size > 0 ? a->img_size : m->cfg.input_size[1];
}

int model_num_classes(const ModelEntry *m, const ModelArgs *a)
{
    return a->num_classes >= 0 ? a->num_classes : m->cfg.num_classes;
}

int model_in_chans(const ModelEntry *m, const ModelArgs *a)
{
    return a->in_chans > 0 ? a->in_chans : m->cfg.input_size[0];
}

static const char *const opt_names[] = {"global_pool", "class_token", "reg_tokens", "fc_norm",
                                        "no_embed_class", "init_values", "qkv_bias", "bn_momentum", "bn_eps"};

int model_args_check(const ModelEntry *m, const ModelArgs *a, CtErr *err)
{
    unsigned lacked = a->opt.set & ~(model_family(m)->opts | MODEL_OPT_GLOBAL_POOL);
    for (int i = 0; lacked; i++)
        if (lacked & 1u << i)
            return ct_fail(err, "%s takes no option '%s' (timm raises TypeError: unexpected keyword argument "
                           "'%s')", m->name, opt_names[i], opt_names[i]);
    /* the convnets' heads pool by SelectAdaptivePool2d; of its pool types ctimm builds the default */
    if ((a->opt.set & MODEL_OPT_GLOBAL_POOL) && !(model_family(m)->opts & MODEL_OPT_GLOBAL_POOL) &&
        strcmp(a->opt.global_pool, "avg"))
        return ct_fail(err, "%s: global_pool '%s' is not built (ctimm's convnets pool by 'avg', timm's default)",
                       m->name, a->opt.global_pool);
    return 0;
}

int model_build(const ModelEntry *m, const ModelSpec *spec, Graph *g, CtErr *err)
{
    Builder b;
    if (model_args_check(m, &spec->args, err))
        return -1;
    int batch = spec->batch_size > 0 ? spec->batch_size : 1, size = model_img_size(m, &spec->args);
    int chans = model_in_chans(m, &spec->args);
    if (size < 1)
        return ct_fail(err, "%s: image size %d must be positive", m->name, size);
    graph_init(g);
    b_init(&b, g, spec->training);
    b.split_bn = spec->split_bn;
    ValueId x = b_input(&b, "input", (CtShape){4, {batch, chans, size, size}}, CT_F32);
    ModelArgs args = spec->args;
    if (args.drop_path_rate < 0)
        args.drop_path_rate = model_family(m)->drop_path_rate;
    ValueId y = m->build(&b, m, &args, x);
    if (y >= 0)
        graph_mark_output(g, y);
    if (b_finish(&b, err)) {
        graph_free(g);
        return ct_failctx(err, "%s", m->name);
    }
    return 0;
}

int model_ckpt_units(const ModelEntry *m, const char **units, int max, CtErr *err)
{
    const ModelFamily *f = model_family(m);
    int n = layer_block_regexes(f ? f->group_matcher : NULL, units, max);
    return n ? n : ct_fail(err, "--grad-checkpointing: %s has no blocks to checkpoint (its group_matcher names none)",
                           m->name);
}
