/*
 * A checkpoint's state_dict for the checkpoint tools (ctimm-avg-checkpoints,
 * ctimm-clean-checkpoint), as timm's load_state_dict(path, use_ema) gives it:
 * the weights file's tensors (a "module." prefix dropped), or with use_ema
 * the model EMA ctimm-train keeps in NAME.state.safetensors ("ema.<name>"),
 * when the run had one; of a PyTorch checkpoint (timm's train.py's .pth.tar),
 * its state_dict, or with use_ema its state_dict_ema when it has one.
 */
#ifndef CTIMM_CLI_STATE_DICT_H
#define CTIMM_CLI_STATE_DICT_H

#include "runtime/safetensors.h"

typedef struct StateDict {
    StFile weights, state; /* state: read only for use_ema */
    StTensor *t;           /* n views into those files, names without "module." / "ema." */
    int n, from_ema;
} StateDict;

/* use_ema: the EMA when the .state file beside path has one for every
 * tensor, else the weights (a file with only some is refused). */
int state_dict_read(const char *path, int use_ema, StateDict *sd, CtErr *err);
void state_dict_free(StateDict *sd);
/* XXH3-128 over the tensors' names, dtypes, shapes and bytes, in order, as
 * 32 hex digits: the content hash the tools record and print. */
void state_dict_hash(const StTensor *t, int n, char out[33]);

#endif
