/*
 * The window machinery Swin (swin.c) and Swin V2 (swin_v2.c) share, over
 * [B,H,W,C] tokens: the shifted, padded window partition around a window
 * attention, its relative position index and shift mask (timm's
 * non-persistent buffers, as build-time constants), and patch merging's
 * 2x2 gather.
 */
#ifndef CTIMM_SWIN_COMMON_H
#define CTIMM_SWIN_COMMON_H

#include "models/registry.h"

/* The four stages of a Swin or Swin V2. */
typedef struct SwinArch {
    int patch, window, embed_dim;
    int depths[4], heads[4];
} SwinArch;

/* For tokens i, j of a wh x ww window, the row of the (2wh-1)(2ww-1) table
 * for their offset (get_relative_position_index): the constant
 * "relative_position_index" [N, N], i32. */
ValueId swin_rel_pos_index(Builder *b, int64_t wh, int64_t ww);

/* A window attention over x [B*nW, N, C] (N = wh*ww), adding mask [nW, N, N]
 * to the scores when mask >= 0; returns [B*nW, N, C]. */
typedef ValueId (*SwinWindowAttn)(Builder *b, ValueId x, int heads, int64_t wh, int64_t ww, ValueId mask);

/* SwinTransformer(V2)Block._attn over x [B,H,W,C]: roll by half a window
 * (shifted), pad to whole windows, partition, attend, merge, crop, roll
 * back; the shift's -100 mask is the constant "attn_mask". A window no
 * smaller than the grid becomes the grid, unshifted (_calc_window_shift). */
ValueId swin_shifted_window_attention(Builder *b, ValueId x, int heads, int window, int shifted, SwinWindowAttn attn);

/* PatchMerging's gather: x [B,H,W,C] padded to even H and W, each 2x2
 * neighbourhood as 4C in (w, h) order: [B, H/2, W/2, 4C]. */
ValueId swin_merge_2x2(Builder *b, ValueId x);

/* The attention of a window attention over qkv [B*nW, N, 3C] (nW: the
 * mask's windows an image, 1 without a mask): softmax(q k^T * scale + pos +
 * mask) v, q, k, v viewed [B, nW*heads, N, hd] so that one bias [1,
 * nW*heads, N, N] (pos [1, heads, N, N], plus mask [nW, N, N] when mask >=
 * 0) serves the whole batch. logit_scale < 0: scale hd^-0.5 (Swin);
 * otherwise Swin V2's cosine attention: q and k L2-normalised, q times
 * exp(min(logit_scale, log 100)) (its `heads` values), scale 1 (timm scales
 * the product: the same up to rounding). Returns [B*nW, N, C]. */
ValueId swin_window_sdpa(Builder *b, ValueId qkv, int heads, ValueId pos, ValueId mask, ValueId logit_scale);

/* Swin V2's res-post-norm LayerNorm (eps 1e-5) "<name>", its weight and
 * bias zero (_init_respostnorm; V2-CR's init_values 0). */
ValueId swin_post_norm(Builder *b, const char *name, ValueId x);

/* A model's block over [B,H,W,C] (its window shifted when `shifted`) and its
 * PatchMerging ("downsample") to [B,H/2,W/2,2C]. */
typedef ValueId (*SwinBlock)(Builder *b, ValueId x, int heads, int window, int shifted, double dpr);
typedef ValueId (*SwinMerge)(Builder *b, ValueId x);

/* SwinTransformer(V2).forward: "patch_embed" (the conv, then LayerNorm over
 * NHWC tokens), the stages "layers.i" (a merge before each but the first,
 * then "blocks.j", the odd ones shifted, drop-path rates stagewise), the
 * final LayerNorm "norm", the mean over H and W, dropout and "head.fc"
 * (trunc_normal(.02) weight, zero bias) unless the model has no classes. */
ValueId swin_build(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x, SwinBlock block, SwinMerge merge);

#endif
