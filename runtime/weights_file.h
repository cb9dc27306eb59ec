/*
 * A weights file of any format ctimm reads, told apart by its first bytes
 * rather than its name: torch.save's (.pth, .pth.tar, .bin;
 * runtime/torch_file.h) or safetensors (whose reader says what is wrong
 * with a file that is neither).
 */
#ifndef CTIMM_WEIGHTS_FILE_H
#define CTIMM_WEIGHTS_FILE_H

#include "runtime/safetensors.h"

/* 1 when the file at path begins as torch.save's files do; 0 otherwise,
 * an unreadable file included (its reader says why). */
int weights_is_torch(const char *path);

/* The state_dict at path into out; with use_ema a PyTorch checkpoint's model
 * EMA instead when it has one (*from_ema, when not NULL, says so), as
 * timm's load_state_dict(path, use_ema). A safetensors file is read as it
 * is: ctimm-train keeps its EMA in another file. */
int weights_read(const char *path, int use_ema, StFile *out, int *from_ema, CtErr *err);

#endif
