/*
 * PyTorch checkpoint files (.pth, .pth.tar, .bin): torch.save's zip format
 * (torch >= 1.6: ARCHIVE/data.pkl with each storage at ARCHIVE/data/KEY)
 * and its legacy format (_use_new_zipfile_serialization=False: the magic
 * number, protocol and sys_info pickles, the object's pickle, the storage
 * keys, then each storage's element count and bytes). The pickles go
 * through the restricted unpickler (runtime/torch_pickle.h): nothing in
 * a file is ever executed.
 *
 * What is read, as timm's load_state_dict(path, use_ema) reads it: the
 * checkpoint dict's 'state_dict' (timm's train.py), else its 'model'
 * (DeiT's and others' releases), else the file's dict itself when all its
 * values are tensors (a bare state_dict); with use_ema, the model EMA's
 * ('state_dict_ema', else 'model_ema') instead when the checkpoint has one.
 * Names are cleaned as timm's clean_state_dict ('module.' and '_orig_mod.'
 * dropped). Also read:
 *  - metadata: the checkpoint dict's plain values ('epoch', 'arch',
 *    'metric', 'version', 'amp_scaler', ...) and the fields of its 'args'
 *    (train.py's argparse.Namespace) as "args.<name>", each as Python's
 *    str() prints it; a value that is not a scalar or a short list, tuple
 *    or dict of them is left out;
 *  - not read here: 'optimizer' (its tensors are parsed, never copied;
 *    train/resume_torch.h reads it through torch_open's tree).
 * Tensors come out contiguous (any stride, offset or storage shared with
 * another tensor), in ctimm's dtypes: f32, f64, f16, bf16, i64, i32, u8
 * (torch.bool as u8); another dtype in a state_dict is refused by name.
 * The tensors made may take at most 4x the file's size + 64 MiB (a hostile
 * file of views repeating one storage cannot make us allocate without bound).
 * Refused with the reason: compressed or missing zip entries, TorchScript
 * archives, big-endian files, truncated data, a tensor beyond its storage.
 */
#ifndef CTIMM_TORCH_FILE_H
#define CTIMM_TORCH_FILE_H

#include <stddef.h>

#include "runtime/safetensors.h"
#include "runtime/torch_pickle.h"

/* 1 when a file's first bytes (n of them, 16 are enough) are torch.save's:
 * a zip archive, or a pickle that starts with the legacy magic number. */
int torch_file_sniff(const unsigned char *head, size_t n);

/* The state_dict of the file (the model EMA's with use_ema, when there is
 * one: *from_ema says so, when not NULL) into out, empty on failure; path
 * names the file in messages. */
int torch_parse(const char *path, const void *buf, size_t size, int use_ema, StFile *out, int *from_ema,
                CtErr *err);
int torch_read(const char *path, int use_ema, StFile *out, int *from_ema, CtErr *err);

/* A file opened whole, for a reader that needs more than the state_dict
 * (a train.py checkpoint's optimizer state): the unpickled tree, whose
 * tensors are made on demand. */
typedef struct TorchFile TorchFile;

int torch_open(const char *path, TorchFile **out, CtErr *err);
void torch_close(TorchFile *f);
/* The file's object (a checkpoint dict, a state_dict), owned by f. */
const PkValue *torch_root(const TorchFile *f);
/* The state_dict as torch_read reads it. */
int torch_state_dict(TorchFile *f, int use_ema, StFile *out, int *from_ema, CtErr *err);
/* The tensor v of f's tree into t, contiguous, named `name` (which says
 * where v is in messages); t owns its name and data. Every tensor made
 * from one file counts towards its 4x + 64 MiB allowance. */
int torch_tensor(TorchFile *f, const PkValue *v, const char *name, StTensor *t, CtErr *err);

#endif
