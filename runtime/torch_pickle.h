/*
 * The restricted unpickler for torch.save's pickles. It knows the opcodes
 * of pickle protocols 2 to 5 that a state_dict or a timm train.py
 * checkpoint is written with, and a short list of globals, each an inert
 * token that this file interprets itself: nothing is ever imported or
 * called. The globals: torch._utils._rebuild_tensor{,_v2,_v3} and
 * _rebuild_parameter (a tensor: storage, offset, size, stride), torch's
 * storage classes (torch.FloatStorage, ..., torch.UntypedStorage) and
 * dtypes (torch.float32, ...), collections.OrderedDict (a dict; its
 * attributes, like a state_dict's _metadata, dropped) and argparse.Namespace
 * (a record of its fields, as train.py's `args`). Any other global, and any
 * other opcode (INST, OBJ, EXT*, NEWOBJ_EX, text-protocol opcodes, ...), is
 * refused by name, as torch.load(weights_only=True) refuses it.
 *
 * Persistent ids, ('storage', type, key, location, numel) (and the legacy
 * format's sixth field, None), become storage references that the
 * container (runtime/torch_file.h) resolves to bytes. A tensor's size and
 * stride are checked against its storage's element count when it is built.
 *
 * Bounds, so a hostile pickle costs memory in proportion to its size and
 * never more than a few hundred MB: MARKs nest at most 64 deep, an arena
 * holds at most 4M values and 16M container items (a real checkpoint's
 * pickle has a few hundred thousand), memo indices come in order as pickle
 * writes them, global names are at most 256 bytes.
 */
#ifndef CTIMM_TORCH_PICKLE_H
#define CTIMM_TORCH_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"

typedef enum PkKind {
    PK_NONE,
    PK_BOOL,
    PK_INT,
    PK_BIGINT,  /* past int64: its little-endian two's complement bytes */
    PK_FLOAT,
    PK_STR,
    PK_TUPLE,
    PK_LIST,
    PK_DICT,    /* keys and values alternate in u.seq, in insertion order */
    PK_GLOBAL,  /* an allowed global that was not called */
    PK_STORAGE, /* a persistent id */
    PK_TENSOR,
    PK_RECORD,  /* an argparse.Namespace */
} PkKind;

typedef struct PkValue PkValue;
struct PkValue {
    PkKind kind;
    union {
        int64_t i; /* BOOL, INT */
        double f;
        struct {
            char *s; /* NUL-terminated too (a STR may hold NULs: n counts them) */
            size_t n;
        } str;       /* STR, BIGINT */
        struct {
            PkValue **v;
            size_t n, cap;
        } seq;       /* TUPLE, LIST, DICT */
        struct {
            int what;  /* internal to torch_pickle.c */
            int dtype; /* a storage class's or dtype's pk_dtype index */
        } global;
        struct {
            int dtype;  /* pk_dtype index; "UntypedStorage" counts bytes */
            const char *key;
            int64_t numel;
        } storage;
        struct {
            const PkValue *storage;
            int dtype;           /* the elements' pk_dtype index */
            int64_t offset;      /* in elements */
            const PkValue *size; /* tuples of non-negative ints, of one length */
            const PkValue *stride;
        } tensor;
        const PkValue *fields; /* RECORD: its __dict__ (a DICT), or NULL */
    } u;
};

/* One of torch's dtypes: its name as torch.<name>, its storage class, the
 * ctimm dtype it reads as (-1: none), and its element size. */
typedef struct PkDType {
    const char *name, *storage;
    int ct;
    unsigned size;
} PkDType;

/* NULL past the end of the table. */
const PkDType *pk_dtype(int i);

/* The values of every pickle loaded into one arena live until it is freed. */
typedef struct PkArena PkArena;

int pk_arena_create(PkArena **a, CtErr *err);
void pk_arena_free(PkArena *a);

/* Unpickles one pickle from buf (up to its STOP; *used says how many bytes
 * it took) into a's values; name says what is read in messages (a file, a
 * zip entry). The memo is the pickle's own. */
int pk_load(PkArena *a, const char *name, const unsigned char *buf, size_t size, size_t *used, const PkValue **out,
            CtErr *err);

/* Every storage reference a's pickles made, in order. */
const PkValue *const *pk_storages(const PkArena *a, size_t *n);

/* Python's name for a value's type with its article ("a dict", "an int"), for messages. */
const char *pk_kind_name(const PkValue *v);
/* The value under a str key of a dict (the last, when a pickle set it
 * twice), or NULL. */
const PkValue *pk_dict_get(const PkValue *dict, const char *key);

#endif
