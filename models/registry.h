/*
 * The model registry: timm's model names with their default cfgs, create by
 * name with overrides, listing with a filter and close-match suggestions.
 * Each family (resnet.c, vit.c, ...) contributes a table of entries.
 */
#ifndef CTIMM_REGISTRY_H
#define CTIMM_REGISTRY_H

#include "frontend/builder.h"

/* timm's pretrained/default cfg of a model: its default pretrained tag's
 * (timm.models.get_pretrained_cfg(name)), whose weights are timm/<name>.<tag>
 * on the Hugging Face hub (train/pretrained.h). */
typedef struct ModelCfg {
    const char *tag;
    int input_size[3];
    double mean[3], std[3];
    double crop_pct;
    const char *crop_mode, *interpolation;
    int num_classes;
    const char *first_conv, *classifier;
    /* a distilled model's second head (timm's classifier tuple's second), or NULL */
    const char *classifier_dist;
    int fixed_input_size;
    /* validate.py's test-time size and crop_pct (resolve_data_config's
     * use_test_size); 0: the same as training's */
    int test_input_size;
    double test_crop_pct;
} ModelCfg;

/* Model options a run gives create_model (--gp, --model-kwargs): which of
 * ModelOptions' fields are set. timm drops the None ones, so an unset
 * field is the registered model's value. */
enum {
    MODEL_OPT_GLOBAL_POOL = 1 << 0,
    MODEL_OPT_CLASS_TOKEN = 1 << 1,
    MODEL_OPT_REG_TOKENS = 1 << 2,
    MODEL_OPT_FC_NORM = 1 << 3,
    MODEL_OPT_NO_EMBED_CLASS = 1 << 4,
    MODEL_OPT_INIT_VALUES = 1 << 5,
    MODEL_OPT_QKV_BIAS = 1 << 6,
    /* the EfficientNet builder's resolve_bn_args (train.py's --bn-momentum, --bn-eps) */
    MODEL_OPT_BN_MOMENTUM = 1 << 7,
    MODEL_OPT_BN_EPS = 1 << 8,
};

/* The options, MODEL_OPT_* of set saying which fields are given. */
typedef struct ModelOptions {
    unsigned set;
    char global_pool[16]; /* 'token', 'avg', 'map' (ViT); convnets build 'avg' only */
    int class_token, reg_tokens, fc_norm, no_embed_class, qkv_bias;
    double init_values; /* layer scale's; 0: none (timm's falsy init_values) */
    double bn_momentum, bn_eps; /* every batch norm's, where set */
} ModelOptions;

/* Overrides of create_model(); 0 / negative keeps the model's default. */
typedef struct ModelArgs {
    int num_classes; /* -1: default; 0: no classifier (features) */
    int img_size;
    int in_chans; /* the image's channels, the stem's input (timm's create_model(in_chans=)); 0: the cfg's 3 */
    double drop_rate;
    double drop_path_rate; /* < 0: the model's default (create_model without it); model_build resolves it */
    ModelOptions opt;
} ModelArgs;

struct ModelEntry;
/* Builds the forward graph from input x [B,C,H,W] (C: model_in_chans); returns the logits. */
typedef ValueId (*ModelBuildFn)(Builder *b, const struct ModelEntry *m, const ModelArgs *a, ValueId x);

typedef struct ModelEntry {
    const char *name;
    ModelBuildFn build;
    const void *arch; /* the family's architecture parameters */
    ModelCfg cfg;
    /* fnmatch patterns of model.no_weight_decay(); NULL-terminated */
    const char *const *no_weight_decay;
} ModelEntry;

typedef struct ModelFamily {
    const ModelEntry *entries;
    int n;
    /* the class's group_matcher(coarse=False) (models/layer_groups.h) */
    const struct GroupRule *group_matcher;
    /* the MODEL_OPT_* options its models take; every family takes global_pool,
     * and MODEL_OPT_GLOBAL_POOL marks one that builds other pools than 'avg' */
    unsigned opts;
    /* the constructor's default drop_path_rate, which a run that gives none
     * trains with (Swin's 0.1; most families' 0) */
    double drop_path_rate;
} ModelFamily;

extern const ModelFamily resnet_family, vit_family, convnext_family, efficientnet_family, mobilenetv3_family,
    regnet_family, metaformer_family, resnetv2_family, nfnet_family, byobnet_family, hgnet_family, eva_family,
    swin_family, beit_family, vit_relpos_family, levit_family, swinv2_family, swinv2_cr_family, maxxvit_family;

/* The model of name, or NULL. timm's "arch.tag" names (resnet50.a1_in1k)
 * find arch's: the tag picks pretrained weights (model_tag), not a model. */
const ModelEntry *model_find(const char *name);
/* The family of m (or of a copy of m: by name). */
const ModelFamily *model_family(const ModelEntry *m);
/* --grad-checkpointing's units of m (RematSpec.units): the regexes of its
 * family's group_matcher blocks into units[0..max); their count, or -1 (and
 * why) when it names none. */
int model_ckpt_units(const ModelEntry *m, const char **units, int max, CtErr *err);
/* The tag of an "arch.tag" name (what follows the first '.'), or NULL. */
const char *model_tag(const char *name);
/* Calls fn for every model whose name contains `filter` (all when NULL),
 * in name order. Returns the number listed. */
int model_list(const char *filter, void (*fn)(const ModelEntry *m, void *ctx), void *ctx);
/* Up to `max` registered names closest to `name` (edit distance), best first. */
int model_suggest(const char *name, const char **out, int max);

typedef struct ModelSpec {
    int batch_size; /* 0: 1 */
    int training;
    int split_bn; /* > 1: timm's convert_splitbn_model(model, split_bn) (frontend/builder.h) */
    ModelArgs args;
} ModelSpec;

static inline ModelArgs model_args_default(void) { return (ModelArgs){.num_classes = -1, .drop_path_rate = -1}; }
/* Whether m takes the options a gives (a before m's own checks in model_build):
 * one its family's models lack is refused by name, as timm's TypeError. */
int model_args_check(const ModelEntry *m, const ModelArgs *a, CtErr *err);
/* Input [B,C,H,W] f32 named "input" (C: model_in_chans); one output, the logits. Verified. */
int model_build(const ModelEntry *m, const ModelSpec *spec, Graph *g, CtErr *err);
/* Input size the model is built for under these overrides. */
int model_img_size(const ModelEntry *m, const ModelArgs *a);
int model_num_classes(const ModelEntry *m, const ModelArgs *a);
int model_in_chans(const ModelEntry *m, const ModelArgs *a);

#endif
