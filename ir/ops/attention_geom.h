/*
 * Where sdpa's and sdpa_grad's heads lie in their operands, for both forms
 * of the ops (ir/ops/attention.c): separate q, k, v [B,H,N,D] (k, v
 * [B,H,M,D]) and output [B,H,N,D]; or packed, one qkv [B,N,3,H,D] (a
 * linear's [B,N,3*H*D] output as it is) and output [B,N,H,D] (the [B,N,C]
 * the projection reads), so that no permute, slice or concat copies the
 * heads in or out. Gradients have their operands' layout: dq, dk, dv are
 * laid out as q, k, v (packed: one dqkv), dy as y. sdpa's second output,
 * its statistics [B,H,N] f32, holds each query row's logsumexp of the
 * scores (-inf where every score is -inf), so that the weights are
 * exp(score - lse): sdpa_grad reads it back with y. Shared by the ref
 * kernels, the cpu backend and the cuda launches, so the layout lives in
 * one place.
 */
#ifndef CTIMM_ATTENTION_GEOM_H
#define CTIMM_ATTENTION_GEOM_H

#include <stdint.h>

#include "ir/ir.h"

/* Element strides: head (b, h) starts at b * b_ + h * h_, its row i at + i * row. */
typedef struct AttnStrides {
    int64_t b, h, row;
} AttnStrides;

typedef struct AttnGeom {
    int64_t B, H, N, M, D;
    int packed;
    AttnStrides q, kv, o; /* q (and dq); k and v (and dk, dv); y and dy */
    int64_t k_off, v_off; /* k's and v's start in their operand (packed: in qkv) */
    int k_in, v_in, bias_in;        /* their inputs' indices; bias_in -1 without a bias */
    int dy_in, y_in, stats_in;      /* sdpa_grad's dy, and the forward's outputs it reads; -1 in sdpa */
    int stats_out;                  /* sdpa's statistics; -1 in sdpa_grad */
    int dk_out, dv_out, dbias_out;  /* sdpa_grad's outputs; dbias_out -1 unless asked */
} AttnGeom;

/* The first element of head bh (= b * H + h). */
static inline int64_t attn_head(const AttnStrides *s, int64_t H, int64_t bh)
{
    return bh / H * s->b + bh % H * s->h;
}

/* Where head bh's rows start in a bias of shape s [B or 1, H or 1, N, M]
 * (a broadcast dim steps 0). */
static inline int64_t attn_bias_head(const CtShape *s, int64_t H, int64_t bh)
{
    int64_t NM = s->d[2] * s->d[3];
    return (s->d[0] == 1 ? 0 : bh / H * s->d[1] * NM) + (s->d[1] == 1 ? 0 : bh % H * NM);
}

/* sdpa's iattr[0] and sdpa_grad's iattr[1]: 1 for the packed form. */
static inline int attn_packed(const Node *n) { return (int)n->iattr[n->op == CT_OP_sdpa ? 0 : 1] != 0; }

/* sdpa's inputs: (q, k, v | qkv)[, bias]; sdpa_grad's: (q, k, v | qkv),
 * dy, y, stats[, bias]. */
static inline void attn_geom(const Graph *g, const Node *n, AttnGeom *a)
{
    const CtShape *x = &g->values[n->in[0]].type.shape;
    int grad = n->op == CT_OP_sdpa_grad, nops;
    a->packed = attn_packed(n);
    if (a->packed) {
        a->B = x->d[0], a->N = a->M = x->d[1], a->H = x->d[3], a->D = x->d[4];
        int64_t HD = a->H * a->D;
        a->q = a->kv = (AttnStrides){a->N * 3 * HD, a->D, 3 * HD};
        a->o = (AttnStrides){a->N * HD, a->D, HD};
        a->k_off = HD, a->v_off = 2 * HD;
        a->k_in = a->v_in = 0;
        a->dk_out = a->dv_out = 0;
        nops = 1;
    } else {
        a->B = x->d[0], a->H = x->d[1], a->N = x->d[2], a->D = x->d[3];
        a->M = g->values[n->in[1]].type.shape.d[2];
        a->q = a->o = (AttnStrides){a->H * a->N * a->D, a->N * a->D, a->D};
        a->kv = (AttnStrides){a->H * a->M * a->D, a->M * a->D, a->D};
        a->k_off = a->v_off = 0;
        a->k_in = 1, a->v_in = 2;
        a->dk_out = 1, a->dv_out = 2;
        nops = 3;
    }
    a->dy_in = grad ? nops : -1, a->y_in = grad ? nops + 1 : -1, a->stats_in = grad ? nops + 2 : -1;
    a->stats_out = grad ? -1 : 1;
    a->bias_in = n->nin > nops + 3 * grad ? nops + 3 * grad : -1;
    a->dbias_out = grad && n->nout > nops ? nops : -1;
}

#endif
