/*
 * What the SIMT harness (runtime/cuda_sim/simt.h, C) and a kernel module
 * compiled behind sim_prelude.h (C++) share: the context a module reads its
 * built-ins from and calls back through. Valid C and C++; pasted as text in
 * front of the prelude (sim_abi_text.c, made at build time).
 *
 * A module exports ct_sim_bind(ctx): the harness hands it its context once,
 * at load, and the module fills in where its __shared__ variables lie. The
 * module needs no symbol of the executable: every call into the harness
 * goes through the context's function pointers.
 *
 * Before it runs or resumes a CUDA thread, the harness writes that thread's
 * thread_idx (and the block's block_idx) into the context; a module reads
 * them after every call into the harness, since a call may switch threads.
 */
#ifndef CTIMM_SIM_ABI_H
#define CTIMM_SIM_ABI_H

typedef struct CtSimDim {
    unsigned int x, y, z;
} CtSimDim;

/* The warp operations; each completes when every live lane of its mask has
 * arrived (runtime/cuda_sim/sim_warp.c says what each computes). */
enum CtSimWarpOp {
    CT_SIM_SHFL_IDX, CT_SIM_SHFL_UP, CT_SIM_SHFL_DOWN, CT_SIM_SHFL_XOR,
    CT_SIM_BALLOT, CT_SIM_ANY, CT_SIM_ALL, CT_SIM_SYNCWARP,
    CT_SIM_REDUCE_ADD, CT_SIM_REDUCE_MIN_U, CT_SIM_REDUCE_MAX_U, CT_SIM_REDUCE_MIN_I, CT_SIM_REDUCE_MAX_I,
    CT_SIM_REDUCE_AND, CT_SIM_REDUCE_OR, CT_SIM_REDUCE_XOR,
    CT_SIM_NWARP_OPS
};

/* The block barriers: __syncthreads and its reducing forms. */
enum CtSimBarrierOp { CT_SIM_SYNC, CT_SIM_SYNC_COUNT, CT_SIM_SYNC_AND, CT_SIM_SYNC_OR };

typedef struct CtSimCtx {
    CtSimDim thread_idx, block_idx, block_dim, grid_dim;
    void *dyn_shared; /* the launch's dynamic shared memory (ct_dyn_shared()) */
    /* A warp operation of the current thread: v its value (the bits of the
     * variable, zero-extended), arg the source lane, delta or lane mask;
     * returns the bits the thread receives. */
    unsigned long long (*warp)(struct CtSimCtx *c, int op, unsigned int mask, unsigned long long v, int arg,
                               int width);
    /* A barrier of the current thread's block; returns the reduced predicate. */
    int (*barrier)(struct CtSimCtx *c, int op, int pred);
    /* The live lanes of the current thread's warp (__activemask). */
    unsigned int (*active)(struct CtSimCtx *c);
    /* __trap(): the launch fails; never returns to the kernel. */
    void (*trap)(struct CtSimCtx *c);
    void *run; /* the harness's state of the launch under way */
    /* Set by ct_sim_bind: the module's __shared__ variables, poisoned before every block. */
    char *shared_begin, *shared_end;
} CtSimCtx;

#endif
