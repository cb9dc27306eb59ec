/*
 * The unpickler: a stack machine over the allowed opcodes, as CPython's
 * _pickle.c runs them (MARK starts a new frame of the stack, memo indices
 * are the pickler's), with every global resolved against the allowlist at
 * the moment it is read and every call (REDUCE, NEWOBJ, BUILD) interpreted
 * here for the few globals that may be called. Values come from fixed-size
 * chunks of the arena and are freed all at once with it, so the shared and
 * cyclic references a memo can make cost nothing to free.
 *
 * Over 600 lines: one opcode switch over one machine state, kept whole so
 * that each opcode's checks (stack depth, types, limits) read in one place.
 */
#include "runtime/torch_pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype.h"

#define MAX_MARKS 64
#define MAX_VALUES (1u << 22)
#define MAX_ITEMS (1u << 24)
#define MAX_GLOBAL_NAME 256
#define CHUNK_VALUES 4096

static const PkDType dtypes[] = {
    {"float32", "FloatStorage", CT_F32, 4},
    {"float64", "DoubleStorage", CT_F64, 8},
    {"float16", "HalfStorage", CT_F16, 2},
    {"bfloat16", "BFloat16Storage", CT_BF16, 2},
    {"int64", "LongStorage", CT_I64, 8},
    {"int32", "IntStorage", CT_I32, 4},
    {"uint8", "ByteStorage", CT_U8, 1},
    {"bool", "BoolStorage", CT_U8, 1}, /* one byte, 0 or 1: read as u8 */
    {"int16", "ShortStorage", -1, 2},
    {"int8", "CharStorage", -1, 1},
    {"complex64", "ComplexFloatStorage", -1, 8},
    {"complex128", "ComplexDoubleStorage", -1, 16},
    {"uint16", NULL, -1, 2},
    {"uint32", NULL, -1, 4},
    {"uint64", NULL, -1, 8},
    {"float8_e4m3fn", NULL, -1, 1},
    {"float8_e5m2", NULL, -1, 1},
    /* torch >= 2 names an untyped storage so: bytes, the tensor's dtype given apart */
    {"uint8", "UntypedStorage", CT_U8, 1},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const PkDType *pk_dtype(int i) { return i >= 0 && i < NDTYPES ? &dtypes[i] : NULL; }

/* What an allowed global is. */
enum { G_ORDERED_DICT, G_REBUILD_TENSOR, G_REBUILD_V2, G_REBUILD_V3, G_REBUILD_PARAMETER, G_NAMESPACE, G_STORAGE, G_DTYPE };

static const struct {
    const char *module, *name;
    int what;
} callables[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT},
    {"torch._utils", "_rebuild_tensor", G_REBUILD_TENSOR},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_V2},
    {"torch._utils", "_rebuild_tensor_v3", G_REBUILD_V3},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER},
    {"argparse", "Namespace", G_NAMESPACE},
};

typedef struct Chunk {
    struct Chunk *next;
    size_t used;
    PkValue v[CHUNK_VALUES];
} Chunk;

struct PkArena {
    Chunk *chunks;
    size_t nvalues, nitems;
    PkValue none, yes, no; /* shared by every pickle of the arena */
    const PkValue **storages;
    size_t nstorages, storages_cap;
    /* the pickle being loaded */
    PkValue **stack;
    size_t sp, stack_cap;
    size_t marks[MAX_MARKS];
    int nmarks;
    PkValue **memo;
    size_t nmemo, memo_cap;
};

/* ------------------------------------------------------------------ */
/* The arena                                                           */
/* ------------------------------------------------------------------ */

int pk_arena_create(PkArena **out, CtErr *err)
{
    PkArena *a = calloc(1, sizeof *a);
    if (!a)
        return ct_fail(err, "out of memory for an unpickler");
    a->none.kind = PK_NONE;
    a->yes = (PkValue){.kind = PK_BOOL, .u.i = 1};
    a->no = (PkValue){.kind = PK_BOOL, .u.i = 0};
    *out = a;
    return 0;
}

void pk_arena_free(PkArena *a)
{
    if (!a)
        return;
    for (Chunk *c = a->chunks, *next; c; c = next) {
        next = c->next;
        for (size_t i = 0; i < c->used; i++) {
            PkValue *v = &c->v[i];
            if (v->kind == PK_STR || v->kind == PK_BIGINT)
                free(v->u.str.s);
            else if (v->kind == PK_TUPLE || v->kind == PK_LIST || v->kind == PK_DICT)
                free(v->u.seq.v);
        }
        free(c);
    }
    free(a->storages);
    free(a->stack);
    free(a->memo);
    free(a);
}

const PkValue *const *pk_storages(const PkArena *a, size_t *n)
{
    *n = a->nstorages;
    return a->storages;
}

/* Makes room for need elements of size elem in *p (capacity *cap). */
static int reserve(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*(void **)p, c * elem);
    if (!q)
        return -1;
    *(void **)p = q;
    *cap = c;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Reading one pickle                                                  */
/* ------------------------------------------------------------------ */

typedef struct Rd {
    PkArena *a;
    const char *name;
    const unsigned char *b;
    size_t n, pos, op_at; /* op_at: where the opcode being run starts */
    CtErr *err;
} Rd;

static int bad(Rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(Rd *r, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ct_fail(r->err, "%.200s: pickle byte %zu: %s", r->name, r->op_at, what);
}

static const struct {
    unsigned char op;
    const char *name;
} opnames[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
    {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
    {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
    {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
    {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"},
    {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"},
    {0x8b, "LONG4"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"}, {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
    {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

static int refuse_opcode(Rd *r, unsigned char op)
{
    for (size_t i = 0; i < sizeof opnames / sizeof opnames[0]; i++)
        if (opnames[i].op == op)
            return bad(r, "opcode %s (0x%02x) is not allowed: a state_dict is never written with it", opnames[i].name,
                       op);
    return bad(r, "0x%02x is not a pickle opcode (corrupt?)", op);
}

/* The next k bytes, or NULL (and err set) when the pickle ends first. */
static const unsigned char *take(Rd *r, size_t k)
{
    if (r->n - r->pos < k) {
        bad(r, "the pickle ends inside this opcode (truncated?)");
        return NULL;
    }
    const unsigned char *p = r->b + r->pos;
    r->pos += k;
    return p;
}

static uint64_t le(const unsigned char *p, int k)
{
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static PkValue *new_value(Rd *r, PkKind kind)
{
    PkArena *a = r->a;
    if (a->nvalues == MAX_VALUES) {
        bad(r, "more than %u values: not a state_dict's pickle", MAX_VALUES);
        return NULL;
    }
    if (!a->chunks || a->chunks->used == CHUNK_VALUES) {
        Chunk *c = malloc(sizeof *c);
        if (!c) {
            bad(r, "out of memory");
            return NULL;
        }
        c->next = a->chunks;
        c->used = 0;
        a->chunks = c;
    }
    PkValue *v = &a->chunks->v[a->chunks->used++];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    a->nvalues++;
    return v;
}

static int push(Rd *r, PkValue *v)
{
    PkArena *a = r->a;
    if (!v)
        return -1;
    if (reserve(&a->stack, &a->stack_cap, a->sp + 1, sizeof *a->stack))
        return bad(r, "out of memory");
    a->stack[a->sp++] = v;
    return 0;
}

/* Where the innermost MARK's frame starts: pops never go below it. */
static size_t frame_start(const PkArena *a) { return a->nmarks ? a->marks[a->nmarks - 1] : 0; }

static PkValue *pop(Rd *r)
{
    PkArena *a = r->a;
    if (a->sp == frame_start(a)) {
        bad(r, "the stack is empty (a corrupt pickle)");
        return NULL;
    }
    return a->stack[--a->sp];
}

static PkValue *top(Rd *r)
{
    PkArena *a = r->a;
    if (a->sp == frame_start(a)) {
        bad(r, "the stack is empty (a corrupt pickle)");
        return NULL;
    }
    return a->stack[a->sp - 1];
}

/* Ends the innermost MARK's frame: its items are stack[*from, sp). */
static int pop_mark(Rd *r, size_t *from)
{
    PkArena *a = r->a;
    if (!a->nmarks)
        return bad(r, "no MARK to end (a corrupt pickle)");
    *from = a->marks[--a->nmarks];
    return 0;
}

static int add_item(Rd *r, PkValue *seq, PkValue *item)
{
    PkArena *a = r->a;
    if (a->nitems == MAX_ITEMS)
        return bad(r, "more than %u container items: not a state_dict's pickle", MAX_ITEMS);
    if (reserve(&seq->u.seq.v, &seq->u.seq.cap, seq->u.seq.n + 1, sizeof *seq->u.seq.v))
        return bad(r, "out of memory");
    seq->u.seq.v[seq->u.seq.n++] = item;
    a->nitems++;
    return 0;
}

/* The value just below the items of a MARK's frame that ended at from
 * (the list or dict APPENDS and SETITEMS add them to). */
static PkValue *below_mark(Rd *r, size_t from)
{
    if (from == frame_start(r->a)) {
        bad(r, "nothing below the MARK to add items to (a corrupt pickle)");
        return NULL;
    }
    return r->a->stack[from - 1];
}

/* A tuple, list or dict's items from stack[from, sp), which are popped. */
static int add_items(Rd *r, PkValue *seq, size_t from)
{
    PkArena *a = r->a;
    for (size_t i = from; i < a->sp; i++)
        if (add_item(r, seq, a->stack[i]))
            return -1;
    a->sp = from;
    return 0;
}

static const char *kind_name(PkKind k);

static int expect(Rd *r, const PkValue *v, PkKind kind, const char *what)
{
    if (v->kind != kind)
        return bad(r, "%s is %s, not %s", what, kind_name(v->kind), kind_name(kind));
    return 0;
}

static int int_arg(Rd *r, const PkValue *v, const char *what, int64_t *out)
{
    if (v->kind != PK_INT || v->u.i < 0)
        return bad(r, "%s must be a non-negative int, not %s", what, v->kind == PK_INT ? "negative" : pk_kind_name(v));
    *out = v->u.i;
    return 0;
}

/* ------------------------------------------------------------------ */
/* The allowed globals and what calling them makes                     */
/* ------------------------------------------------------------------ */

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > MAX_GLOBAL_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return 0;
    return 1;
}

static int push_global(Rd *r, const char *module, const char *name)
{
    int what = -1, dtype = -1;
    for (size_t i = 0; i < sizeof callables / sizeof callables[0] && what < 0; i++)
        if (!strcmp(module, callables[i].module) && !strcmp(name, callables[i].name))
            what = callables[i].what;
    int torch = !strcmp(module, "torch");
    for (int i = 0; i < NDTYPES && what < 0; i++) {
        const char *storage = dtypes[i].storage;
        if (storage && !strcmp(name, storage) &&
            (torch || (!strcmp(module, "torch.storage") && !strcmp(name, "UntypedStorage"))))
            what = G_STORAGE, dtype = i;
        else if (torch && !strcmp(name, dtypes[i].name))
            what = G_DTYPE, dtype = i;
    }
    if (what < 0)
        return bad(r, "global '%s.%s' is not allowed: a state_dict holds only tensors, storages, dtypes, "
                   "OrderedDict and plain values (and a checkpoint's argparse.Namespace)", module, name);
    PkValue *v = new_value(r, PK_GLOBAL);
    if (!v)
        return -1;
    v->u.global.what = what;
    v->u.global.dtype = dtype;
    return push(r, v);
}

static int op_global(Rd *r)
{
    char part[2][MAX_GLOBAL_NAME + 1];
    for (int k = 0; k < 2; k++) {
        const unsigned char *s = r->b + r->pos, *nl = memchr(s, '\n', r->n - r->pos);
        if (!nl)
            return bad(r, "the pickle ends inside GLOBAL's name (truncated?)");
        size_t len = (size_t)(nl - s);
        if (!name_ok((const char *)s, len))
            return bad(r, "GLOBAL's %s name is empty, longer than %d bytes or not printable ASCII",
                       k ? "attribute" : "module", MAX_GLOBAL_NAME);
        memcpy(part[k], s, len);
        part[k][len] = 0;
        r->pos += len + 1;
    }
    return push_global(r, part[0], part[1]);
}

static int op_stack_global(Rd *r)
{
    PkValue *name = pop(r), *module = name ? pop(r) : NULL;
    if (!module)
        return -1;
    if (module->kind != PK_STR || name->kind != PK_STR || !name_ok(module->u.str.s, module->u.str.n) ||
        !name_ok(name->u.str.s, name->u.str.n))
        return bad(r, "STACK_GLOBAL needs two printable names of at most %d bytes", MAX_GLOBAL_NAME);
    return push_global(r, module->u.str.s, name->u.str.s);
}

/* The element count of a tensor of this size, and its last element's index
 * in its storage (-1 when it has none); -1 when either overflows. */
static int tensor_extent(const PkValue *size, const PkValue *stride, int64_t offset, int64_t *numel, int64_t *last)
{
    int64_t n = 1, end = offset;
    for (size_t d = 0; d < size->u.seq.n; d++) {
        int64_t s = size->u.seq.v[d]->u.i, st = stride->u.seq.v[d]->u.i, step;
        if (__builtin_mul_overflow(n, s, &n))
            return -1;
        if (s > 0 && (__builtin_mul_overflow(s - 1, st, &step) || __builtin_add_overflow(end, step, &end)))
            return -1;
    }
    *numel = n;
    *last = n ? end : -1;
    return 0;
}

/* torch._utils._rebuild_tensor{,_v2,_v3}(storage, storage_offset, size,
 * stride, [requires_grad, backward_hooks, [dtype,]] [metadata]). */
static PkValue *rebuild_tensor(Rd *r, int what, const PkValue *args)
{
    size_t n = args->u.seq.n, lo = what == G_REBUILD_TENSOR ? 4 : what == G_REBUILD_V2 ? 6 : 7,
           hi = what == G_REBUILD_TENSOR ? 4 : lo + 1;
    PkValue *const *a = args->u.seq.v;
    int64_t offset = 0, v;
    if (n < lo || n > hi) {
        bad(r, "a tensor rebuild with %zu arguments (torch writes %zu)", n, lo);
        return NULL;
    }
    if (expect(r, a[0], PK_STORAGE, "a tensor's storage") || int_arg(r, a[1], "a tensor's offset", &offset) ||
        expect(r, a[2], PK_TUPLE, "a tensor's size") || expect(r, a[3], PK_TUPLE, "a tensor's stride"))
        return NULL;
    if (a[2]->u.seq.n != a[3]->u.seq.n) {
        bad(r, "a tensor's size has %zu dims but its stride %zu", a[2]->u.seq.n, a[3]->u.seq.n);
        return NULL;
    }
    for (size_t d = 0; d < 2 * a[2]->u.seq.n; d++)
        if (int_arg(r, a[2 + d % 2]->u.seq.v[d / 2], d % 2 ? "a stride" : "a size", &v))
            return NULL;
    int dtype = a[0]->u.storage.dtype;
    if (what == G_REBUILD_V3) {
        if (a[6]->kind != PK_GLOBAL || a[6]->u.global.what != G_DTYPE) {
            bad(r, "_rebuild_tensor_v3's dtype is %s, not a torch dtype", pk_kind_name(a[6]));
            return NULL;
        }
        dtype = a[6]->u.global.dtype;
    }
    /* the tensor's bytes made contiguous, and the bytes of storage it reaches, fit an int64 */
    int64_t numel, last, bytes, need, have;
    int64_t es = dtypes[dtype].size, ses = dtypes[a[0]->u.storage.dtype].size;
    if (tensor_extent(a[2], a[3], offset, &numel, &last) || __builtin_mul_overflow(numel, es, &bytes) ||
        __builtin_add_overflow(last, 1, &need) || __builtin_mul_overflow(need, es, &need) ||
        __builtin_mul_overflow(a[0]->u.storage.numel, ses, &have)) {
        bad(r, "a tensor's size, stride or offset overflows");
        return NULL;
    }
    if (numel && need > have) {
        bad(r, "a tensor reaches byte %lld of storage '%.64s', which holds %lld", (long long)need,
            a[0]->u.storage.key, (long long)have);
        return NULL;
    }
    PkValue *t = new_value(r, PK_TENSOR);
    if (t) {
        t->u.tensor.storage = a[0];
        t->u.tensor.dtype = dtype;
        t->u.tensor.offset = offset;
        t->u.tensor.size = a[2];
        t->u.tensor.stride = a[3];
    }
    return t;
}

/* REDUCE: callable(*args), for the globals that may be called. */
static int op_reduce(Rd *r)
{
    PkValue *args = pop(r), *f = args ? top(r) : NULL, *out = NULL;
    if (!f || expect(r, args, PK_TUPLE, "REDUCE's arguments"))
        return -1;
    int what = f->kind == PK_GLOBAL ? f->u.global.what : -1;
    if (what == G_ORDERED_DICT) {
        if (args->u.seq.n)
            return bad(r, "collections.OrderedDict is called with arguments (pickle never writes that)");
        out = new_value(r, PK_DICT);
    } else if (what == G_REBUILD_TENSOR || what == G_REBUILD_V2 || what == G_REBUILD_V3) {
        out = rebuild_tensor(r, what, args);
    } else if (what == G_REBUILD_PARAMETER) {
        if (args->u.seq.n != 3 || args->u.seq.v[0]->kind != PK_TENSOR)
            return bad(r, "_rebuild_parameter takes a tensor, requires_grad and hooks");
        out = args->u.seq.v[0];
    } else if (f->kind == PK_GLOBAL) {
        const PkDType *d = &dtypes[f->u.global.dtype < 0 ? 0 : f->u.global.dtype];
        return bad(r, "calling %s%s is not allowed", what == G_NAMESPACE ? "argparse.Namespace" : "torch.",
                   what == G_STORAGE ? d->storage : what == G_DTYPE ? d->name : "");
    } else {
        return bad(r, "calling %s is not allowed", pk_kind_name(f));
    }
    if (!out)
        return -1;
    r->a->stack[r->a->sp - 1] = out;
    return 0;
}

/* NEWOBJ: cls.__new__(cls, *args), for argparse.Namespace only. */
static int op_newobj(Rd *r)
{
    PkValue *args = pop(r), *cls = args ? pop(r) : NULL;
    if (!cls)
        return -1;
    if (cls->kind != PK_GLOBAL || cls->u.global.what != G_NAMESPACE)
        return bad(r, "NEWOBJ of %s: only argparse.Namespace may be made", pk_kind_name(cls));
    if (args->kind != PK_TUPLE || args->u.seq.n)
        return bad(r, "argparse.Namespace made with arguments (pickle never writes that)");
    return push(r, new_value(r, PK_RECORD));
}

/* BUILD: a Namespace gets its fields; an OrderedDict's attributes (a
 * state_dict's _metadata) are dropped. */
static int op_build(Rd *r)
{
    PkValue *state = pop(r), *inst = state ? top(r) : NULL;
    if (!inst)
        return -1;
    if (inst->kind == PK_RECORD) {
        if (state->kind != PK_DICT)
            return bad(r, "an argparse.Namespace's state is %s, not a dict", pk_kind_name(state));
        inst->u.fields = state;
        return 0;
    }
    if (inst->kind == PK_DICT)
        return 0;
    return bad(r, "BUILD on %s is not allowed", pk_kind_name(inst));
}

/* BINPERSID: ('storage', storage class, key, location, numel[, None]). */
static int op_persid(Rd *r)
{
    PkValue *pid = pop(r);
    if (!pid || expect(r, pid, PK_TUPLE, "a persistent id"))
        return -1;
    PkValue *const *f = pid->u.seq.v;
    size_t n = pid->u.seq.n;
    if (n < 5 || n > 6 || f[0]->kind != PK_STR || f[0]->u.str.n != 7 || strcmp(f[0]->u.str.s, "storage"))
        return bad(r, "a persistent id that is not ('storage', type, key, location, numel)");
    if (f[1]->kind != PK_GLOBAL || f[1]->u.global.what != G_STORAGE)
        return bad(r, "a storage's type is %s, not a torch storage class", pk_kind_name(f[1]));
    if (f[2]->kind != PK_STR || f[2]->u.str.n != strlen(f[2]->u.str.s) || f[3]->kind != PK_STR)
        return bad(r, "a storage's key and location must be strings");
    if (n == 6 && f[5]->kind != PK_NONE)
        return bad(r, "storage '%.64s' is a view of another (torch < 1.0's format), not supported", f[2]->u.str.s);
    PkValue *s = new_value(r, PK_STORAGE);
    if (!s || int_arg(r, f[4], "a storage's element count", &s->u.storage.numel))
        return -1;
    s->u.storage.dtype = f[1]->u.global.dtype;
    s->u.storage.key = f[2]->u.str.s;
    PkArena *a = r->a;
    if (reserve(&a->storages, &a->storages_cap, a->nstorages + 1, sizeof *a->storages))
        return bad(r, "out of memory");
    a->storages[a->nstorages++] = s;
    return push(r, s);
}

/* ------------------------------------------------------------------ */
/* Scalars, strings and the memo                                       */
/* ------------------------------------------------------------------ */

static int push_int(Rd *r, int64_t i)
{
    PkValue *v = new_value(r, PK_INT);
    if (v)
        v->u.i = i;
    return push(r, v);
}

/* LONG1 / LONG4: k little-endian two's complement bytes. */
static int push_long(Rd *r, size_t k)
{
    const unsigned char *p = take(r, k);
    if (!p)
        return -1;
    if (k <= 8) {
        uint64_t u = le(p, (int)k);
        if (k && k < 8 && p[k - 1] & 0x80)
            u |= ~0ull << (8 * k);
        return push_int(r, (int64_t)u);
    }
    PkValue *v = new_value(r, PK_BIGINT);
    if (!v)
        return -1;
    v->u.str.s = malloc(k);
    if (!v->u.str.s)
        return bad(r, "out of memory");
    memcpy(v->u.str.s, p, k);
    v->u.str.n = k;
    return push(r, v);
}

static int push_str(Rd *r, uint64_t len)
{
    if (len > r->n - r->pos)
        return bad(r, "a string of %llu bytes runs past the pickle's end (truncated?)", (unsigned long long)len);
    const unsigned char *p = take(r, (size_t)len);
    PkValue *v = new_value(r, PK_STR);
    if (!v)
        return -1;
    v->u.str.s = malloc((size_t)len + 1);
    if (!v->u.str.s)
        return bad(r, "out of memory");
    memcpy(v->u.str.s, p, (size_t)len);
    v->u.str.s[len] = 0;
    v->u.str.n = (size_t)len;
    return push(r, v);
}

static int push_float(Rd *r)
{
    const unsigned char *p = take(r, 8);
    if (!p)
        return -1;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = bits << 8 | p[i]; /* big-endian */
    PkValue *v = new_value(r, PK_FLOAT);
    if (v)
        memcpy(&v->u.f, &bits, sizeof bits);
    return push(r, v);
}

/* A memo slot is written in order (pickle numbers them as it goes) or
 * overwritten; a gap would let a tiny pickle ask for a huge memo. */
static int memo_put(Rd *r, uint64_t i)
{
    PkArena *a = r->a;
    PkValue *v = top(r);
    if (!v)
        return -1;
    if (i > a->nmemo)
        return bad(r, "memo index %llu out of order (the next is %zu)", (unsigned long long)i, a->nmemo);
    if (i == a->nmemo) {
        if (reserve(&a->memo, &a->memo_cap, a->nmemo + 1, sizeof *a->memo))
            return bad(r, "out of memory");
        a->nmemo++;
    }
    a->memo[i] = v;
    return 0;
}

static int memo_get(Rd *r, uint64_t i)
{
    if (i >= r->a->nmemo)
        return bad(r, "memo index %llu was never set", (unsigned long long)i);
    return push(r, r->a->memo[i]);
}

/* ------------------------------------------------------------------ */
/* The opcode loop                                                     */
/* ------------------------------------------------------------------ */

/* The opcodes that build containers. */
static int op_container(Rd *r, unsigned char op)
{
    PkArena *a = r->a;
    size_t from = 0;
    PkValue *v, *k, *c;
    switch (op) {
    case ')': return push(r, new_value(r, PK_TUPLE));
    case ']': return push(r, new_value(r, PK_LIST));
    case '}': return push(r, new_value(r, PK_DICT));
    case 't':
        if (pop_mark(r, &from) || !(v = new_value(r, PK_TUPLE)) || add_items(r, v, from))
            return -1;
        return push(r, v);
    case 0x85: case 0x86: case 0x87: {
        size_t k3 = (size_t)(op - 0x84);
        if (a->sp - frame_start(a) < k3)
            return bad(r, "TUPLE%zu with fewer items on the stack (a corrupt pickle)", k3);
        if (!(v = new_value(r, PK_TUPLE)) || add_items(r, v, a->sp - k3))
            return -1;
        return push(r, v);
    }
    case 'a':
        if (!(v = pop(r)) || !(c = top(r)) || expect(r, c, PK_LIST, "APPEND's target"))
            return -1;
        return add_item(r, c, v);
    case 'e':
        if (pop_mark(r, &from) || !(c = below_mark(r, from)) || expect(r, c, PK_LIST, "APPENDS' target"))
            return -1;
        return add_items(r, c, from);
    case 's':
        if (!(v = pop(r)) || !(k = pop(r)) || !(c = top(r)) || expect(r, c, PK_DICT, "SETITEM's target"))
            return -1;
        return add_item(r, c, k) || add_item(r, c, v) ? -1 : 0;
    default: /* 'u' */
        if (pop_mark(r, &from) || !(c = below_mark(r, from)) || expect(r, c, PK_DICT, "SETITEMS' target"))
            return -1;
        if ((a->sp - from) % 2)
            return bad(r, "SETITEMS with an odd number of items (a corrupt pickle)");
        return add_items(r, c, from);
    }
}

/* Runs one opcode; 1 at STOP. */
static int step(Rd *r)
{
    PkArena *a = r->a;
    r->op_at = r->pos;
    const unsigned char *p = take(r, 1);
    if (!p)
        return -1;
    unsigned char op = *p;
    switch (op) {
    case 0x80:
        if (!(p = take(r, 1)))
            return -1;
        return *p >= 2 && *p <= 5 ? 0 : bad(r, "pickle protocol %d (torch.save writes 2; 2 to 5 are read)", *p);
    case 0x95: return take(r, 8) ? 0 : -1; /* FRAME: a reading hint */
    case '.': return 1;
    case '(':
        if (a->nmarks == MAX_MARKS)
            return bad(r, "MARKs nested deeper than %d", MAX_MARKS);
        a->marks[a->nmarks++] = a->sp;
        return 0;
    case 'N': return push(r, &a->none);
    case 0x88: return push(r, &a->yes);
    case 0x89: return push(r, &a->no);
    case 'J': return (p = take(r, 4)) ? push_int(r, (int32_t)(uint32_t)le(p, 4)) : -1;
    case 'K': return (p = take(r, 1)) ? push_int(r, *p) : -1;
    case 'M': return (p = take(r, 2)) ? push_int(r, (int64_t)le(p, 2)) : -1;
    case 0x8a: return (p = take(r, 1)) ? push_long(r, *p) : -1;
    case 0x8b:
        if (!(p = take(r, 4)))
            return -1;
        return (int32_t)(uint32_t)le(p, 4) < 0 ? bad(r, "LONG4 with a negative length")
                                               : push_long(r, (size_t)le(p, 4));
    case 'G': return push_float(r);
    case 'X': return (p = take(r, 4)) ? push_str(r, le(p, 4)) : -1;
    case 0x8c: return (p = take(r, 1)) ? push_str(r, *p) : -1;
    case 0x8d: return (p = take(r, 8)) ? push_str(r, le(p, 8)) : -1;
    case ')': case ']': case '}': case 't': case 0x85: case 0x86: case 0x87: case 'a': case 'e': case 's': case 'u':
        return op_container(r, op);
    case 'c': return op_global(r);
    case 0x93: return op_stack_global(r);
    case 'R': return op_reduce(r);
    case 0x81: return op_newobj(r);
    case 'b': return op_build(r);
    case 'Q': return op_persid(r);
    case 'h': return (p = take(r, 1)) ? memo_get(r, *p) : -1;
    case 'j': return (p = take(r, 4)) ? memo_get(r, le(p, 4)) : -1;
    case 'q': return (p = take(r, 1)) ? memo_put(r, *p) : -1;
    case 'r': return (p = take(r, 4)) ? memo_put(r, le(p, 4)) : -1;
    case 0x94: return memo_put(r, a->nmemo);
    default: return refuse_opcode(r, op);
    }
}

int pk_load(PkArena *a, const char *name, const unsigned char *buf, size_t size, size_t *used, const PkValue **out,
            CtErr *err)
{
    Rd r = {.a = a, .name = name, .b = buf, .n = size, .err = err};
    a->sp = 0;
    a->nmarks = 0;
    a->nmemo = 0;
    int rc;
    while (!(rc = step(&r)))
        ;
    PkValue *v = rc < 0 ? NULL : pop(&r); /* STOP: the value on top is the result */
    if (!v)
        return -1;
    *out = v;
    *used = r.pos;
    return 0;
}

static const char *kind_name(PkKind k)
{
    static const char *const names[] = {"None",      "a bool",   "an int",    "an int",    "a float",
                                        "a str",     "a tuple",  "a list",    "a dict",    "a global",
                                        "a storage", "a tensor", "an argparse.Namespace"};
    return names[k];
}

const char *pk_kind_name(const PkValue *v) { return kind_name(v->kind); }

const PkValue *pk_dict_get(const PkValue *dict, const char *key)
{
    const PkValue *found = NULL;
    size_t n = strlen(key);
    for (size_t i = 0; dict->kind == PK_DICT && i + 1 < dict->u.seq.n; i += 2) {
        const PkValue *k = dict->u.seq.v[i];
        if (k->kind == PK_STR && k->u.str.n == n && !memcmp(k->u.str.s, key, n))
            found = dict->u.seq.v[i + 1];
    }
    return found;
}
