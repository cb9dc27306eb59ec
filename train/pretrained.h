/*
 * Pretrained weights as timm's create_model(pretrained=True) finds and
 * adapts them (timm/models/_builder.py load_pretrained), never from the
 * network.
 *
 * Which: timm's "arch.tag" names (resnet50.a1_in1k); a bare arch means its
 * default tag (ModelCfg.tag). From the Hugging Face hub cache
 * (train/hub_cache.h: timm/<arch>.<tag>'s model.safetensors, else
 * pytorch_model.bin), or a file (train.py's --pretrained-path: any weights
 * file ctimm reads, a train.py checkpoint's model EMA first, as timm's
 * load_state_dict).
 *
 * The data config: the hub snapshot's config.json pretrained_cfg (mean,
 * std, crop_pct, crop_mode, interpolation, input_size, num_classes,
 * classifier) replaces the registry's cfg in the resolved model entry, so
 * it is the default the callers' flags override (timm's
 * resolve_data_config). Without config.json, and for a file, the cfg is the
 * registry's, which is the default tag's: another tag is taken only with
 * its config.json.
 *
 * On load, as load_pretrained and ViT's checkpoint_filter_fn adapt them:
 *  - a model of another class count than the cfg's num_classes keeps its
 *    own initialisation of the classifier (the cfg's `classifier` weight and
 *    bias), as does every model loading a --pretrained-path file (train.py
 *    overlays num_classes=-1 to force it);
 *  - a ViT of another patch grid (--img-size) gets the file's pos_embed
 *    resampled (train/pos_embed.h) from the grid of the cfg's input size;
 *  - a model of other input channels (--in-chans) gets the cfg's
 *    first_conv weight adapted from the file's 3 (adapt_input_conv: summed
 *    for 1 channel; repeated and scaled by 3 / C for C);
 *  - BatchNorm's num_batches_tracked may be missing (runtime/state.h).
 * Each step is one line of the log.
 */
#ifndef CTIMM_TRAIN_PRETRAINED_H
#define CTIMM_TRAIN_PRETRAINED_H

#include "models/registry.h"
#include "runtime/state.h"
#include "train/hub_cache.h"

typedef enum { PRETRAINED_NONE, PRETRAINED_HUB, PRETRAINED_FILE } PretrainedSource;

#define PRETRAINED_LOG_LINES 5

typedef struct Pretrained {
    ModelEntry m; /* the model, its cfg the weights' pretrained cfg */
    PretrainedSource source;
    char tag[64];
    char repo[192];                  /* PRETRAINED_HUB: "timm/<arch>.<tag>" */
    char weights[HUB_PATH_MAX];      /* the file to load; "" for PRETRAINED_NONE */
    char config[HUB_PATH_MAX];       /* the config.json the cfg came from, or "" */
    char interpolation[16], crop_mode[16], classifier[64]; /* the strings of config.json m.cfg points at */
    char log[PRETRAINED_LOG_LINES][640]; /* pretrained_load's lines: the source, then each adaptation */
    int nlog;
} Pretrained;

/* The model `name` (as given: "arch" or "arch.tag") of registry entry m,
 * with its weights from src (path: the file of PRETRAINED_FILE). With
 * PRETRAINED_NONE only the name is checked: a tag other than the default
 * one is refused, as only its config.json says how to feed that model.
 * p points into itself: never copied. */
int pretrained_resolve(Pretrained *p, const ModelEntry *m, const char *name, PretrainedSource src, const char *path,
                       CtErr *err);
/* Reads the weights and loads them into s (a state of p->m with `classes`
 * classes), adapted; p->log says what was done. */
int pretrained_load(Pretrained *p, CtState *s, int classes, CtErr *err);

#endif
