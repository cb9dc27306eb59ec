/*
 * A ViT's learned position embedding moved to another patch grid, as timm's
 * resample_abs_pos_embed (timm/layers/pos_embed.py) does it when
 * vision_transformer.py's checkpoint_filter_fn loads pretrained weights
 * (its defaults: bicubic, antialias=True, align_corners None).
 */
#ifndef CTIMM_TRAIN_POS_EMBED_H
#define CTIMM_TRAIN_POS_EMBED_H

/* src is [prefix + old_h*old_w, dim] (tokens in row-major grid order after
 * the prefix tokens: class token and the like), dst [prefix + new_h*new_w,
 * dim]. The prefix tokens are copied; the grid is resized as torch's
 * F.interpolate(mode='bicubic', align_corners=False, antialias=True). */
void pos_embed_resample(const float *src, int prefix, int old_h, int old_w, int new_h, int new_w, int dim,
                        float *dst);

/* A relative position bias table moved to another window, as timm's
 * resize_rel_pos_bias_table (timm/layers/pos_embed_rel.py, its default
 * path without scipy) does it when a checkpoint_filter_fn loads weights for
 * another window: each head's src_h x src_w table of offsets (2h-1 by
 * 2w-1) placed on a geometric scale that reaches the new table's extent,
 * then read at the new offsets by bilinear interpolation (the edge values
 * beyond it). flat: src [src_h*src_w + extra, heads] (Swin, BEiT: extra
 * rows for the class token, copied), else [heads, src_h, src_w] (MaxViT's
 * TF tables, extra 0); dst the same at dst_h x dst_w. */
void rel_pos_table_resize(const float *src, int src_h, int src_w, int heads, int flat, int extra, int dst_h, int dst_w,
                          float *dst);

#endif
