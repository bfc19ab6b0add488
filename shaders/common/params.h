// Argument structs shared by the host and every kernel target.
//
// Only 4-byte scalars and arrays of them: identical layout in C++, CUDA and
// MSL (no float3, whose size differs in MSL). Sizes and offsets are
// static_assert'ed here, which every target compiles.
#pragma once
#include "compat.h"

#define SPLAT_TILE_SIZE 16
#define SPLAT_NEAR_PLANE 0.01f
#define SPLAT_FAR_PLANE 1e10f
#define SPLAT_MAX_SH_COEFFS 16
// Floats per Gaussian of the factored SH gradient (sh.h): b[16], dc[3], pad.
#define SPLAT_SH_FACTOR_FLOATS 20
SPLAT_STATIC_ASSERT(SPLAT_SH_FACTOR_FLOATS == SPLAT_MAX_SH_COEFFS + 4 && SPLAT_MAX_SH_COEFFS % 4 == 0,
                    "SH gradient factors: b[16], dc, pad, in whole quads");
// Floats per record of the colour's direction Jacobian (sh.h ShColorJacobian,
// project.h): its three rows, one quad each (x, y, z, pad).
#define SPLAT_COLOR_JAC_FLOATS 12

// The camera of one view. w2c holds the first three rows of the 4x4
// world-to-camera matrix, row-major (OpenCV axes).
struct CameraParams {
  float w2c[12];
  float fx, fy, cx, cy;
  float center[3];  // camera centre in world space, -R^T t
  float tan_fovx, tan_fovy;
  uint32_t width, height;
  uint32_t tiles_x, tiles_y;
  float near_plane, far_plane;
};
SPLAT_STATIC_ASSERT(sizeof(CameraParams) == 108, "CameraParams layout");

// Per-call scene description for projection and rasterization.
struct RasterParams {
  uint32_t num_gaussians;
  uint32_t sh_degree;   // degree evaluated (0..3)
  uint32_t sh_stride;   // coefficients stored per Gaussian (K)
  uint32_t num_tiles;
  float background[3];
  uint32_t antialiased;  // 1: the 2D filter's opacity compensation (projection.h)
  // Several views in one binning (docs/architecture.md, "Several views a
  // step"): view v's records are [v view_records, (v + 1) view_records) and
  // its tiles follow the views' before it (view_tile_base). 0: one view.
  uint32_t view_records;
  uint32_t record_base;  // projection: the first record (and depth id) of this launch
  // 1: the chunked stop (rasterize_forward.h, docs/gpu.md "The chunked
  // stop"): within each chunk of a tile's list the blend's stop applies to
  // the chunk's own product from 1, and a pixel stops after the first chunk
  // that leaves its T below the stop. 0: the blend's stop, splat by splat.
  uint32_t chunk_stop;
  uint32_t pad1;
};
SPLAT_STATIC_ASSERT(sizeof(RasterParams) == 48, "RasterParams layout");

// Views rasterized together, up to SPLAT_VIEWS_LAUNCH_MAX a launch of the
// per-Gaussian kernels (project.h, project_forward_views_body and
// project_backward_views_body): views first .. first + count - 1 of a batch
// of `views`, their cameras, and (the backward) which of them (bit c: cams[c])
// add to the densification statistics.
#define SPLAT_VIEWS_LAUNCH_MAX 8
struct ViewsParams {
  CameraParams cams[SPLAT_VIEWS_LAUNCH_MAX];
  uint32_t first, count, views, track_mask;
};
SPLAT_STATIC_ASSERT(sizeof(ViewsParams) == 108 * SPLAT_VIEWS_LAUNCH_MAX + 16, "ViewsParams layout");

// The first global tile of record i's view: views share one size, so view v's
// tiles are [v T, (v + 1) T) with T = tiles_x tiles_y.
SPLAT_FUNC uint32_t view_tile_base(SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
                                   uint32_t i) {
  return rp.view_records != 0u ? i / rp.view_records * (cam.tiles_x * cam.tiles_y) : 0u;
}

// ---------------------------------------------------------------------------
// SIMT kernel arguments (shaders/kernels, cpp/gpu). Passed by value (CUDA
// kernel parameters; Metal `constant` structs set with setBytes).
// ---------------------------------------------------------------------------

// Threads per threadgroup of every SIMT kernel but the backward
// rasterization and the chunk pass, and what one threadgroup of the scan and radix-sort kernels
// covers.
#define SPLAT_GROUP_SIZE 256
#define SPLAT_GROUP_WARPS (SPLAT_GROUP_SIZE / 32)
// The backward rasterization's threadgroup: a tile's 256 pixels, two per
// thread (rasterize_backward.h).
#define SPLAT_BWD_PIXELS 2
#define SPLAT_BWD_THREADS (SPLAT_GROUP_SIZE / SPLAT_BWD_PIXELS)
#define SPLAT_BWD_WARPS (SPLAT_BWD_THREADS / 32)
// The forward's chunk pass likewise: a tile's 256 pixels, two per thread
// (rasterize_forward.h).
#define SPLAT_CHUNK_PIXELS 2
#define SPLAT_CHUNK_THREADS (SPLAT_GROUP_SIZE / SPLAT_CHUNK_PIXELS)
#define SPLAT_SCAN_ITEMS_PER_THREAD 16
#define SPLAT_SCAN_BLOCK (SPLAT_GROUP_SIZE * SPLAT_SCAN_ITEMS_PER_THREAD)
#define SPLAT_RADIX_BITS 8
#define SPLAT_RADIX (1 << SPLAT_RADIX_BITS)
// Keys per radix-sort threadgroup: 8 per thread (2048). A pass is
// latency-bound: 4096-key blocks left 77 threadgroups for 315k Gaussians on
// a 132-SM GPU, but 1024-key blocks spent more on each block's fixed work
// (its scans of the 256 digits, the row scans over twice the blocks) than
// they gained: 2048 sorted faster at 1M, 6M and lego_400's 123k (H100,
// docs/gpu.md "Sort blocks of 2048 keys"). 4096 would pass Metal's 32 KB of
// threadgroup memory (the staged scatter's keys and values).
#define SPLAT_SORT_ROUNDS 8
#define SPLAT_SORT_BLOCK (SPLAT_GROUP_SIZE * SPLAT_SORT_ROUNDS)
// Pair emission (tile_bin.h): a Gaussian of at most this many pairs is
// emitted by its rank's thread, a larger one in pieces of this many slots,
// one thread a piece. The grid covers both roles: n ranks and the pieces of
// `slots` pair slots (the count, or the capacity when sized on the device).
// 16: emission on thermos (fast preset, 160k Gaussians) 0.060 ms at 32, 0.052
// at 16, 0.046 at 8; on lego_400 (275k, none above 25 pairs) 0.026 / 0.030.
// The host sizes the grid with its own value: a smaller one given to the
// kernels alone (SPLAT_NVRTC_OPTIONS) leaves pieces past the grid unwritten.
#ifndef SPLAT_EMIT_PIECE
#define SPLAT_EMIT_PIECE 16u
#endif
SPLAT_FUNC uint32_t emit_pair_threads(uint32_t n, uint32_t slots) {
  const uint32_t pieces = slots / SPLAT_EMIT_PIECE + (slots % SPLAT_EMIT_PIECE != 0u ? 1u : 0u);
  return n > pieces ? n : pieces;
}

// Gradient components accumulated per Gaussian (and per pair when
// deterministic): mean2d (2), conic (3), opacity (1), colour (3).
#define SPLAT_PAIR_GRAD 9

// What projection keeps per visible Gaussian for the blend (48 bytes);
// `opacity` is what the blend uses (antialiased: times the compensation).
struct SplatRecord {
  float mean2d[2];
  float conic[3];
  float opacity;
  float color[3];
  float depth;
  float sigmoid_opacity;  // sigmoid(logit): opacity without the antialiased compensation
  float color_clamped;    // ShColorJacobian::clamped (sh.h), 0..7, for the projection backward
};
SPLAT_STATIC_ASSERT(sizeof(SplatRecord) == 48, "SplatRecord layout");

// What pair emission (and the deterministic backward) reads to walk a visible
// splat's tiles, as one aligned 32-byte record: a memory sector a Gaussian,
// where it gathered the blend record's first two quads, the tile rect and the
// radius from three arrays (shaders/kernels/cover_record.h). The rect's
// corners in 16-bit halves, x | y << 16 (tile counts stay below 2^16).
struct CoverRecord {
  float mean2d[2];
  float conic[3];
  float opacity;
  uint32_t rect_min;  // tile_min_x | tile_min_y << 16
  uint32_t rect_max;  // tile_max_x | tile_max_y << 16 (exclusive)
};
SPLAT_STATIC_ASSERT(sizeof(CoverRecord) == 32, "CoverRecord layout");

// Element counts of the scan / sort / binning kernels.
struct ScanParams {
  uint32_t count;       // elements
  uint32_t num_blocks;  // ceil(count / SPLAT_SCAN_BLOCK), radix: ceil(count / SPLAT_SORT_BLOCK)
  uint32_t row_length;  // scan_rows: elements per row
  uint32_t shift;       // radix kernels: bit offset of this pass's digit
};
SPLAT_STATIC_ASSERT(sizeof(ScanParams) == 16, "ScanParams layout");

// The pair count of a training forward sized on the device (docs/gpu.md,
// "Pairs sized on the device"): pair_total writes it after the scan of the
// pair counts; emission, the pair sort and the tile ranges read `live`, and
// the host reads the rest at its sync points. One record per device, zeroed
// by the host once it has read it.
struct PairStatus {
  uint32_t live;        // pairs the forward emits: its total, or 0 when a forward since the last read did not fit
  uint32_t overflow;    // sticky: 1 once a forward's total exceeded the capacity
  uint32_t first_step;  // the step of the first forward that did not fit
  uint32_t saturated;   // that total is a lower bound (a scan block wrapped)
  uint32_t max_lo, max_hi;  // the largest total since the last read (64 bits)
  uint32_t pad0, pad1;
};
SPLAT_STATIC_ASSERT(sizeof(PairStatus) == 32, "PairStatus layout");

// Whether the step that wrote `radius` is skipped: its pairs did not fit, and
// emission set every radius to -1 (tile_bin.h). Every kernel that changes the
// training state between the host's sync points checks it.
SPLAT_FUNC bool step_skipped(SPLAT_DEVICE_MEM const int32_t* radius) { return radius[0] < 0; }

// pair_total: the scanned block sums of the pair counts, the capacity of
// the pair buffers, and the training step (recorded on overflow).
struct PairParams {
  uint32_t num_blocks;
  uint32_t capacity;
  uint32_t step;
  uint32_t pad;
};
SPLAT_STATIC_ASSERT(sizeof(PairParams) == 16, "PairParams layout");

// Backward rasterization: whether d_alpha is bound (else it is zero).
struct BackwardParams {
  uint32_t has_d_alpha;
  uint32_t num_pairs;
  uint32_t pad0, pad1;
};
SPLAT_STATIC_ASSERT(sizeof(BackwardParams) == 16, "BackwardParams layout");

// Specialization constant values of raster_backward (CUDA -D defines, Metal
// function constants; see cpp/gpu/kernels.cpp for the valid combinations).
#define SPLAT_BWD_REDUCE_SIMD 0
#define SPLAT_BWD_REDUCE_TG 1
#define SPLAT_BWD_REDUCE_ORIGINAL 2
#define SPLAT_BWD_RANGE_LAST_CONTRIBUTOR 0
#define SPLAT_BWD_RANGE_FULL 1
#define SPLAT_BWD_SPARSE_WARP_ANY 0
#define SPLAT_BWD_SPARSE_OFF 1
#define SPLAT_BWD_ATOMIC_LANE_ZERO 0
#define SPLAT_BWD_ATOMIC_SPREAD_LANES 1

// ---------------------------------------------------------------------------
// Training kernels (shaders/kernels/train_*.h).
// ---------------------------------------------------------------------------

// The fused loss (1 - w) L1 + w (1 - SSIM) over a [H,W,3] render. d_l1 and
// d_map are the host's (1 - w) / (3 V) and -w / (3 V), rounded once, V the
// pixels that count (H W without a mask; with a mask of none, all three 0
// and ssim_weight 0: the loss and its gradient are 0).
struct LossParams {
  uint32_t width, height;
  uint32_t tiles_x, num_tiles;
  float d_l1, d_map;
  float ssim_weight;
  float inv_count;  // 1 / (3 V)
  uint32_t has_mask;  // the mask argument holds 1 byte a pixel, 0: the pixel does not count
  // Several views binned together (views > 1): this is view view_k of them,
  // and loss[0] gets the views' mean at the last, loss[3] their running sum
  // (accumulate_view, adam.h), as grad_accumulate sums a view at a time.
  uint32_t view_k, views;
  uint32_t pad0;
};
SPLAT_STATIC_ASSERT(sizeof(LossParams) == 48, "LossParams layout");

// Views rasterized together: one loss launch pair over up to
// SPLAT_LOSS_MAX_VIEWS views of one size (train_loss.h, ssim_*_views_body).
// What differs between the views: where each target (and mask) lies in the
// images' (masks') buffer, in bytes, and the means its valid pixels give.
#define SPLAT_LOSS_MAX_VIEWS 8
struct LossView {
  uint64_t target_offset, mask_offset;
  float d_l1, d_map, ssim_weight, inv_count;
  uint32_t has_mask, pad0;
};
SPLAT_STATIC_ASSERT(sizeof(LossView) == 40, "LossView layout");
struct LossViewsParams {
  // The views' size and tiles; views: the batch's views; view_k: the batch
  // index of this launch's first view (its views are view_k .. view_k + count - 1).
  LossParams base;
  uint32_t count;
  uint32_t pad0, pad1, pad2;
  LossView views[SPLAT_LOSS_MAX_VIEWS];
};
SPLAT_STATIC_ASSERT(sizeof(LossViewsParams) == 64 + 40 * SPLAT_LOSS_MAX_VIEWS, "LossViewsParams layout");

// One fused Adam step over every parameter group: the five arrays are one
// virtual array of count * (11 + sh_width) floats.
struct AdamParams {
  uint32_t count;     // Gaussians
  uint32_t sh_width;  // floats of sh per Gaussian (3 K)
  // Each rate's step size, adam_step_size(lr, 1 - beta1^t) (adam.h), as the host computes it.
  float step_means, step_log_scales, step_quats, step_opacity, step_sh_dc, step_sh_rest;
  float beta1, beta2, eps;
  float rsqrt_bias2;  // adam_rsqrt_bias2(1 - beta2^t)
  uint32_t moment_key;  // bf16_moments: adam_moment_key(seed, t) (adam.h)
  uint32_t sh_k_count;  // active SH coefficients of the gradient (its factors, sh.h)
  uint32_t visible_only;  // 1: only Gaussians with radius > 0 in the step's view (train.visible_adam)
  uint32_t sh_grad_full;  // 1: the SH gradient is given in full ([n, sh_width], data-parallel), not factored
  // 1: each group's m array holds both moments packed in bfloat16 (adam.h,
  // adam_update_bf16) and its v array is not read.
  uint32_t bf16_moments;
  // Factored SH gradient of several views a step (sh_factor_grad_views, sh.h):
  // this many factor sets, SPLAT_SH_FACTOR_FLOATS count floats apart; 0 or 1: one.
  uint32_t sh_views;
  uint32_t pad1, pad2;
};
SPLAT_STATIC_ASSERT(sizeof(AdamParams) == 80, "AdamParams layout");

// The adam kernel's threads (train_optim.h): one per quad (4 floats) of each
// group in turn, means [3n] | log_scales [3n] | quats [4n] | opacity [n] |
// sh [n sh_width]; a group's last quad may be partial.
SPLAT_FUNC uint32_t float_quads(uint32_t floats) { return (floats + 3u) / 4u; }
SPLAT_FUNC uint32_t adam_quads(uint32_t n, uint32_t sh_width) {
  return 2u * float_quads(3u * n) + n + float_quads(n) + float_quads(n * sh_width);
}

// Expansion of the factored SH gradient (project.h, expand_sh_grad_body).
struct ShGradParams {
  uint32_t count;      // Gaussians
  uint32_t sh_stride;  // coefficients per Gaussian in the layout
  uint32_t k_count;    // active coefficients ((degree + 1)^2)
  uint32_t views;      // factor sets (AdamParams::sh_views): the expansion is their mean
};
SPLAT_STATIC_ASSERT(sizeof(ShGradParams) == 16, "ShGradParams layout");

// Per-Gaussian element-wise training kernels (statistics, opacity reset).
// Several views a step (train_optim.h, grad_accumulate_body): view `k` of
// `views` over `count` floats of one gradient array; with_loss: also the
// view's loss (one dispatch of the step's).
struct AccumulateParams {
  uint32_t count;
  uint32_t k;
  uint32_t views;
  uint32_t with_loss;
};
SPLAT_STATIC_ASSERT(sizeof(AccumulateParams) == 16, "AccumulateParams layout");

struct ElementParams {
  uint32_t count;
  uint32_t width, height;  // image size (statistics)
  float value;             // opacity reset: the logit cap
};
SPLAT_STATIC_ASSERT(sizeof(ElementParams) == 16, "ElementParams layout");

// The growth cap after densification (train_optim.h, cap_scales_body).
struct ScaleCapParams {
  uint32_t count;    // Gaussians
  uint32_t record;   // 1: first set each Gaussian's ceiling from its scales now
  float log_growth;  // what a recorded ceiling adds to the largest log scale
  uint32_t pad0;
};
SPLAT_STATIC_ASSERT(sizeof(ScaleCapParams) == 16, "ScaleCapParams layout");

// The count of non-finite parameters (shaders/kernels/train_check.h): each of
// `groups` threadgroups strides over every parameter array and writes five
// partial counts, then one threadgroup sums them.
struct FiniteParams {
  uint32_t count;     // Gaussians
  uint32_t sh_width;  // floats of sh per Gaussian (3 K)
  uint32_t groups;    // threadgroups of the counting pass
  uint32_t pad;
};
SPLAT_STATIC_ASSERT(sizeof(FiniteParams) == 16, "FiniteParams layout");
#define SPLAT_FINITE_ARRAYS 5

// Exposure compensation (shaders/kernels/train_exposure.h): the step's view
// and its pixels, the partial sums of its gradient, and its Adam step over
// every view's correction (12 floats each).
struct ExposureParams {
  uint32_t pixels;  // of the step's view
  uint32_t view;    // the step's view: its correction is exposure[12 view ..]
  uint32_t blocks;  // threadgroups of exposure_backward (one partial each)
  uint32_t floats;  // 12 x views
  float lr, beta1, beta2, eps;
  float bias1, bias2;  // 1 - beta^t, as the host computes them
  uint32_t all_views;  // exposure_adam: 1 = every view's gradient from grad_views (the ranks' mean)
  uint32_t pad1;
};
SPLAT_STATIC_ASSERT(sizeof(ExposureParams) == 48, "ExposureParams layout");

// Densification on the device (shaders/kernels/train_densify.h).
struct DensifyParams {
  uint32_t count;        // Gaussians before densifying (n)
  uint32_t split_count;  // children per split Gaussian
  uint32_t room;         // max_gaussians - n (saturating)
  uint32_t seed, step;
  uint32_t width;        // gather: floats per Gaussian of the array
  uint32_t is_log_scales;  // gather: children take log_scale - log_div
  uint32_t is_moment;      // gather: an Adam moment (new rows start at zero)
  float grad_threshold, clone_max_scale;
  float log_div;          // log(split_scale_divisor)
  float logit_min;        // logit(prune_opacity)
  float prune_max_world_scale, prune_max_screen_radius;
  uint32_t out_count;     // gather: Gaussians after densifying (the rows written)
  // > 0: the screen-size pruning takes only a Gaussian whose largest scale is
  // under its radius times this, i.e. one seen that large from nearer than a
  // set depth (DensifySettings::prune_screen_scale_per_px); 0: any size.
  float prune_screen_scale_per_px;
};
SPLAT_STATIC_ASSERT(sizeof(DensifyParams) == 64, "DensifyParams layout");

// The MCMC strategy on the device (shaders/kernels/train_mcmc.h).
struct McmcParams {
  uint32_t count;       // Gaussians n (before a growth)
  uint32_t targets;     // per-target dispatches: n (relocation: the dead ones) or the Gaussians added
  uint32_t grow;        // 0: relocation (targets are the dead among 0..n), 1: growth (targets n ..)
  uint32_t num_blocks;  // weight blocks of SPLAT_GROUP_SIZE Gaussians
  uint32_t seed, step;
  uint32_t sh_width;    // floats of sh per Gaussian (3 K)
  uint32_t draw;        // the sampling's random draw (MCMC_DRAW_*)
  float min_opacity;    // dead at or below; relocated opacities are at least this
  float noise_scale;    // noise_lr times the means' learning rate
  float opacity_weight; // opacity_reg / n
  float scale_weight;   // scale_reg / 3n
  uint32_t width;       // mcmc_apply / mcmc_copy: floats per Gaussian of the array (copy: floats)
  uint32_t kind;        // mcmc_apply: what the array is (MCMC_ARRAY_*)
  uint32_t sources;     // mcmc_apply: 0 the targets, 1 the sampled sources
  uint32_t pad0;
};
SPLAT_STATIC_ASSERT(sizeof(McmcParams) == 64, "McmcParams layout");

// Chunks: the backward walks each batch of a tile's list (a chunk of
// SPLAT_GROUP_SIZE positions) in its own threadgroup, so deep tiles spread
// over the GPU. It starts from the pixel state the forward left at the end of
// the chunk: transmittance and accumulated colour, 4 floats per pixel, at
// checkpoints[4 (SPLAT_GROUP_SIZE chunk_slot + tid) ..]. Chunk b of a tile
// whose list starts at `start` has slot tile + start / SPLAT_GROUP_SIZE + b:
// distinct for every (tile, chunk) of the non-empty tiles, whose lists follow
// one another in tile order, and below
// num_tiles + num_pairs / SPLAT_GROUP_SIZE + 1 (chunk_slots()). The forward
// records each chunk's tile at chunk_tiles[slot]; slots no chunk uses keep
// whatever they held, and the backward checks the tile it reads back.
SPLAT_FUNC uint32_t chunk_slot(uint32_t tile, uint32_t start, uint32_t chunk) {
  return tile + start / (uint32_t)SPLAT_GROUP_SIZE + chunk;
}

// Chunks of the list [start, end).
SPLAT_FUNC uint32_t chunk_count(uint32_t start, uint32_t end) {
  return (end - start + (uint32_t)SPLAT_GROUP_SIZE - 1u) / (uint32_t)SPLAT_GROUP_SIZE;
}

// Index of pixel `tid`'s entry in chunk k's slot (chunk_state, chunk_last).
SPLAT_FUNC uint32_t chunk_pixel(uint32_t tile, uint32_t start, uint32_t k, uint32_t tid) {
  return chunk_slot(tile, start, k) * (uint32_t)SPLAT_GROUP_SIZE + tid;
}

SPLAT_FUNC uint32_t chunk_slots(uint32_t num_tiles, uint32_t num_pairs) {
  return num_tiles + num_pairs / (uint32_t)SPLAT_GROUP_SIZE + 1u;
}

// The forward's chunk pass (rasterize_forward.h) in one launch over the chunk
// slots (all zero), or in launches that skip the chunks no pixel reaches
// (BackendConfig.raster_forward_chunks = skip_saturated): first one launch
// per chunk index k < head_chunks, grid num_tiles, chunk k of every tile;
// then one over the slots for the chunks from head_chunks on. When the product
// of a tile's chunk transmittances up to chunk k (each chunk's own, from the
// launches before) takes every pixel below half the blend's stop, k goes to
// tile_saturated[tile] (atomic min; in the slot launch a chunk counts alone):
// every pixel stops in or before chunk k, so no later chunk is read, and the
// later chunks are skipped.
struct ChunkPassParams {
  uint32_t head;            // 1: chunk `chunk` of tile b (grid num_tiles); 0: a slot launch
  uint32_t chunk;
  uint32_t tail_from;       // a slot launch: its chunks from this index on
  uint32_t skip_saturated;  // 1: read and write tile_saturated
};
SPLAT_STATIC_ASSERT(sizeof(ChunkPassParams) == 16, "ChunkPassParams layout");
#define SPLAT_NOT_SATURATED 0xffffffffu
