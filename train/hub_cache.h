/*
 * The Hugging Face hub's local cache, read as huggingface_hub lays it out
 * (ctimm never downloads; `huggingface-cli download REPO` fills it):
 *   <cache>/models--<org>--<name>/refs/main                  the revision
 *   <cache>/models--<org>--<name>/snapshots/<rev>/<file>     (links into blobs/)
 * <cache> is huggingface_hub's: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE,
 * else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub. The revision is refs/main's; without it the
 * only snapshot, or the newest of several.
 */
#ifndef CTIMM_TRAIN_HUB_CACHE_H
#define CTIMM_TRAIN_HUB_CACHE_H

#include "ir/status.h"

#define HUB_PATH_MAX 1600

typedef struct HubFiles {
    char cache[1024];       /* the cache folder */
    const char *cache_from; /* what chose it: "$HF_HUB_CACHE", "$HF_HOME/hub", ..., or "the default; ..." */
    char weights[HUB_PATH_MAX]; /* the snapshot's model.safetensors, else its pytorch_model.bin (timm's order) */
    char config[HUB_PATH_MAX];  /* the snapshot's config.json, "" when it has none */
} HubFiles;

/* The files of repo ("timm/resnet50.a1_in1k") in the cache. When they are
 * not there, err says where it looked, what is missing, and the command
 * that downloads them. */
int hub_find(const char *repo, HubFiles *out, CtErr *err);

#endif
