/*
 * timm's --model-kwargs KEY=VALUE ... (utils.ParseKwargs: each VALUE a
 * Python literal, else a string), which the scripts splat into
 * create_model after their own keyword arguments. Of timm's model options
 * ctimm's builders have one a script does not pass itself: img_size, which
 * models of fixed input size (ViTs) are built for. Every other key is
 * refused by name: one the script passes itself as timm would
 * ("got multiple values"), any other as an option ctimm's models lack.
 */
#ifndef CTIMM_TRAIN_MODEL_KWARGS_H
#define CTIMM_TRAIN_MODEL_KWARGS_H

#include "ir/status.h"
#include "models/registry.h"

/* A keyword argument a script passes to create_model itself, and its flag. */
typedef struct ScriptKwarg {
    const char *key, *flag;
} ScriptKwarg;

/* train.py's, ended by {NULL}. */
extern const ScriptKwarg train_py_model_kwargs[];

/* The words kv[0..n) read: *img_size the img_size given (0: none). */
int model_kwargs_parse(const char *const *kv, int n, const ScriptKwarg *passed, const char *script, int *img_size,
                       CtErr *err);

/* Whether img_size (0: none) fits model m, whose data is data_img pixels:
 * only a model of fixed input size takes it (timm's others raise
 * TypeError), and its patch embedding takes no other size than the data's. */
int model_kwargs_check(const ModelEntry *m, int img_size, int data_img, CtErr *err);

#endif
