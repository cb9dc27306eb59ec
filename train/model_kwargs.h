/*
 * timm's --model-kwargs KEY=VALUE ... (utils.ParseKwargs: each VALUE a
 * Python literal, else a string), which the scripts splat into
 * create_model after their own keyword arguments, and --gp (global_pool).
 * Of timm's model options ctimm's builders take img_size, which models of
 * fixed input size (ViTs) are built for, and the ViT's global_pool,
 * class_token, reg_tokens, fc_norm, no_embed_class, init_values and
 * qkv_bias (models/registry.h's ModelOptions). Every other key is refused by
 * name: one the script passes itself as timm would ("got multiple values"),
 * any other as an option ctimm's models lack; a value None is dropped, as
 * create_model drops it.
 */
#ifndef CTIMM_TRAIN_MODEL_KWARGS_H
#define CTIMM_TRAIN_MODEL_KWARGS_H

#include "ir/status.h"
#include "models/registry.h"

/* The most --model-kwargs words a command line takes. */
enum { CT_MAX_MODEL_KWARGS = 16 };

/* A keyword argument a script passes to create_model itself, and its flag. */
typedef struct ScriptKwarg {
    const char *key, *flag;
} ScriptKwarg;

/* train.py's, validate.py's and benchmark.py's, each ended by {NULL}. */
extern const ScriptKwarg train_py_model_kwargs[], validate_py_model_kwargs[], benchmark_py_model_kwargs[];

/* The words kv[0..n) read into *a: its img_size (0: none) and the
 * MODEL_OPT_* options they give; a's other fields are left as they are. */
int model_kwargs_parse(const char *const *kv, int n, const ScriptKwarg *passed, const char *script, ModelArgs *a,
                       CtErr *err);

/* --gp POOL (NULL: not given, timm's None) into a's global_pool. */
int model_kwargs_gp(const char *gp, ModelArgs *a, CtErr *err);

/* Whether a's img_size (0: none) and options fit model m, whose data is
 * data_img pixels: only a model of fixed input size takes img_size (timm's
 * others raise TypeError), and its patch embedding takes no other size than
 * the data's; the options as model_args_check. */
int model_kwargs_check(const ModelEntry *m, const ModelArgs *a, int data_img, CtErr *err);

#endif
