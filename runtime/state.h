/*
 * Model state: every parameter and buffer of a graph, in state_dict order,
 * in one flat block (so zeroing, checkpoints and optimizer steps are one
 * loop). Keyed by timm's names, so graphs of the same model (eval, train)
 * share one state, and timm checkpoints load by name.
 */
#ifndef CTIMM_STATE_H
#define CTIMM_STATE_H

#include "ir/ir.h"
#include "runtime/safetensors.h"

typedef struct StateEntry {
    char *name;
    CtType type;
    CtRole role;
    CtInit init;
    size_t offset;
} StateEntry;

typedef struct CtState {
    StateEntry *e;
    int n;
    unsigned char *data;
    size_t nbytes;
} CtState;

/* Entries for g->state, zero-filled. */
void state_create(CtState *s, const Graph *g);
void state_free(CtState *s);
int state_find(const CtState *s, const char *name);
static inline void *state_data(const CtState *s, int i) { return s->data + s->e[i].offset; }

/* timm's initialisation scheme per tensor (each value's CtInit), from one
 * seed; each tensor draws from its own stream keyed by its name, so the
 * result does not depend on the order tensors are created in, nor on the
 * OpenMP threads that draw them (in chunks of a tensor where each element
 * takes a fixed number of draws). */
void state_init(CtState *s, uint64_t seed);

/* Loads every param and buffer from tensors named prefix+name (optimizer
 * state is left as it is). A missing, extra (under the prefix) or
 * mis-shaped tensor is an error naming it; but a missing BatchNorm
 * num_batches_tracked, which torch's load_state_dict fills in, keeps its
 * value, and a file's tensor named as a build-time constant is ignored. */
int state_load(CtState *s, const StFile *f, const char *prefix, CtErr *err);
/* state_load (no prefix) but for the entries named in keep (NULL-ended),
 * which keep their values whether the file has them or not: a model adapted
 * as it loads (timm's load_pretrained drops a classifier it re-initialises). */
int state_load_keeping(CtState *s, const StFile *f, const char *const *keep, CtErr *err);

/* Writes the params and buffers as a safetensors checkpoint under their
 * state_dict names (timm's torch.load_state_dict / safetensors.torch.load_file
 * reads it), with string metadata pairs. */
int state_save(const CtState *s, const char *path, const char *const *meta_keys, const char *const *meta_vals,
               int nmeta, CtErr *err);

/* The training state beside a checkpoint: every optimizer-state tensor
 * ("optim.*") and the rng counter, under those names. Loading takes the rng
 * counter always and the optimizer state only when `optim` is set; a
 * missing, extra or mis-shaped tensor is an error naming it. A model EMA's
 * copies ("ema.*") are the exception, as in timm's resume: a file without
 * them sets *ema_missing (the caller starts the EMA from the weights), and
 * a file's EMA that the state has no place for is ignored. Accumulated
 * gradients ("accum.*", --grad-accum-steps) are optional both ways. */
int state_save_training(const CtState *s, const char *path, const char *const *meta_keys,
                        const char *const *meta_vals, int nmeta, CtErr *err);
int state_load_training(CtState *s, const StFile *f, int optim, int *ema_missing, CtErr *err);

#endif
