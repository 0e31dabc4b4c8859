/* kiln_builder.h - building a network into a serialized plan: optimization
 * passes, optimization profiles, tactic selection and the memory plan. */
#ifndef KILN_BUILDER_H
#define KILN_BUILDER_H

#include "kiln_network.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_builder_config kiln_builder_config;

/* Builder flags (bit set). */
typedef enum kiln_builder_flag {
    KILN_BUILDER_FLAG_NONE = 0,
    KILN_BUILDER_FLAG_NO_FUSION = 1u << 0,  /* keep every layer as it is (debugging) */
    KILN_BUILDER_FLAG_NO_TIMING = 1u << 1,  /* pick tactics by rule, time nothing */
    /* run float layers whose kernels take the type in FP16 / BF16, with
     * casts around them (every backend; docs/accuracy.md) */
    KILN_BUILDER_FLAG_FP16 = 1u << 2,
    KILN_BUILDER_FLAG_BF16 = 1u << 3,
    KILN_BUILDER_FLAG_TF32 = 1u << 4,       /* allow TF32 matrix math (GPU backends) */
    /* every layer on its reference ("ref") tactic, nothing timed: the
     * plain CPU kernels, for accuracy references. Added in 0.1. */
    KILN_BUILDER_FLAG_REF_TACTICS = 1u << 5,
    /* run 2-D float convolutions, and the pools and elementwise layers
     * between them, on channels-last (NHWC) activations, with reformat
     * layers at the edges, on every backend. The CUDA backend does this for
     * float16/bfloat16 convolutions without the flag (unless NO_FUSION).
     * Added in 0.2. */
    KILN_BUILDER_FLAG_CHANNELS_LAST = 1u << 6,
    /* every layer runs in the types the network gives it (a float16 graph
     * in float16): no precision pass, and FP16/BF16/TF32 flags or layer
     * precision constraints are an error (trtexec's --stronglyTyped).
     * Added in 0.2. */
    KILN_BUILDER_FLAG_STRONGLY_TYPED = 1u << 7,
    /* float16 matrix products (MatMul, Gemm and their fused forms) may
     * accumulate in float16 where a GPU tactic offers it; the builder keeps
     * such a tactic only when it times faster. Without the flag every
     * product accumulates in float. Convolutions always accumulate in float.
     * Added in 0.2. */
    KILN_BUILDER_FLAG_FP16_ACCUMULATION = 1u << 8,
    /* FP16 / BF16 allow their type instead of forcing it (TensorRT's
     * meaning, what `kiln exec --fp16` sets): each eligible layer is timed
     * in FP32 and in every allowed type, the casts the choice adds at its
     * edges included, and the fastest is kept (ties keep FP32). With timing
     * off (NO_TIMING, REF_TACTICS, optimization level 0) the rule is: the
     * reduced type on a GPU backend, FP32 on the CPU. Layer precision
     * constraints still force their type. The plan records each decision
     * (kiln_engine_layer_info_json: "precision_choice"). Without this flag
     * FP16 / BF16 force every eligible layer, as before. Added in 0.2. */
    KILN_BUILDER_FLAG_TIMED_PRECISION = 1u << 9,
    /* allow INT8 layers (trtexec's --int8). A network with Q/DQ
     * (QuantizeLinear / DequantizeLinear, QLinearConv, ...) builds its INT8
     * layers where the graph places them with or without the flag
     * (explicit quantization). A network without Q/DQ is quantized by
     * calibration (kiln_builder_config_set_calibration) when the flag is
     * set; without calibration the flag changes nothing. Added in 0.2. */
    KILN_BUILDER_FLAG_INT8 = 1u << 16,
    /* allow FP8 E4M3 layers (trtexec's --fp8): a network with float8e4m3fn
     * Q/DQ builds its FP8 layers (kiln::FP8MatMul, kiln::FP8Conv) on the
     * CPU with or without the flag, on the GPU with it (cuBLASLt FP8 GEMMs
     * on sm_89 and newer, a direct kernel elsewhere);
     * a float network is quantized to FP8 by calibration
     * (kiln_builder_config_set_calibration: scale = threshold / 448), and
     * without calibration the build fails: FP8 needs scales. Added in 0.2. */
    KILN_BUILDER_FLAG_FP8 = 1u << 17
} kiln_builder_flag;

/* Added in 0.1. *out set only on success; free with kiln_builder_config_destroy. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_create(kiln_builder_config **out);
/* Accepts NULL. Added in 0.1. */
KILN_API void kiln_builder_config_destroy(kiln_builder_config *cfg);

/* OR of kiln_builder_flag. Added in 0.1. */
KILN_API void kiln_builder_config_set_flags(kiln_builder_config *cfg, uint32_t flags);
/* The most scratch memory one layer may use, in bytes (0 = no limit). Tactics
 * that need more are not chosen. Added in 0.1. */
KILN_API void kiln_builder_config_set_workspace_limit(kiln_builder_config *cfg, uint64_t bytes);
/* Name of the backend to build for: "cpu" (default) or "cuda". Copied. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_backend(kiln_builder_config *cfg,
                                                                    const char *backend);
/* How hard tactic selection searches (trtexec's --builderOptimizationLevel,
 * 0 to 5, default 3): 0 times nothing (tactics by rule, as
 * KILN_BUILDER_FLAG_NO_TIMING), 1 and 2 time each candidate with 3 runs, 3
 * adds 9 more runs for quick kernels, 4 and 5 add 25. Out of range is
 * KILN_ERR_INVALID_ARGUMENT. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_optimization_level(
    kiln_builder_config *cfg, int level);
/* Threads the CPU backend uses (0 = one per core). Added in 0.1. */
KILN_API void kiln_builder_config_set_threads(kiln_builder_config *cfg, int threads);

/* Constrain the precision of one layer, named as in the network (a fused
 * layer is constrained when any layer it contains is; the name "*" is every
 * layer no other entry names, added in 0.2): KILN_DTYPE_FLOAT keeps
 * it in FP32 under KILN_BUILDER_FLAG_FP16/BF16; KILN_DTYPE_FLOAT16 or
 * KILN_DTYPE_BFLOAT16 runs it in that type even without the flag.
 * UNDEFINED removes the constraint. A later call for the same name replaces
 * an earlier one. Names that match no layer are ignored (logged at
 * warning). The name is copied. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_layer_precision(
    kiln_builder_config *cfg, const char *layer_name, kiln_dtype dtype);

/* The type a network input (is_output 0) or output (1) has in the plan,
 * as trtexec's --inputIOFormats / --outputIOFormats with the linear (chw)
 * format. `index` is the tensor's position among the network's inputs or
 * outputs, or -1 for every one of them of the type's kind (a float type for
 * the float tensors, another type for the rest). A float tensor (float32,
 * float16 or bfloat16 in the model) may be given any of the three: the
 * caller then binds data of that type, and the plan converts where its
 * layers need another (an output already computed in that type under
 * KILN_BUILDER_FLAG_FP16 / BF16 skips its conversion back to float32).
 * Other tensors keep their own type. A later call for the same tensor
 * replaces an earlier one; positions past the network's inputs or outputs,
 * and types a tensor cannot take, fail the build with a message naming
 * them. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_io_type(kiln_builder_config *cfg,
                                                                    int is_output, int index,
                                                                    kiln_dtype dtype);

/* Read tactic timings from this file before building and write new ones to
 * it afterwards (trtexec's --timingCacheFile), so a rebuild on the same
 * device and library versions skips timing. A file made elsewhere is ignored
 * with a warning. NULL or "" turns it off. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_timing_cache(kiln_builder_config *cfg,
                                                                         const char *path);

/* Add an optimization profile; its index is returned in *index. Inputs with
 * dynamic dimensions need min/opt/max shapes in every profile. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_add_profile(kiln_builder_config *cfg,
                                                                    int *index);
/* Set the min/opt/max shape of one input in profile `profile`. min <= opt <=
 * max dimension by dimension; static dimensions must match the network.
 * Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_shape(kiln_builder_config *cfg,
                                                                  int profile, const char *input,
                                                                  int rank, const int64_t *min,
                                                                  const int64_t *opt,
                                                                  const int64_t *max);

/* Give the values of an input that is a shape tensor (its values decide
 * other tensors' shapes, e.g. the `shape` input of a Reshape fed from a graph
 * input), as TensorRT's shape-tensor profiles do: `count` elements of `dtype`
 * for the min, opt and max point of profile `profile`. Values given for an
 * input that turns out not to be a shape tensor are ignored. At run time the
 * values come from the bound input buffer. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_input_values(
    kiln_builder_config *cfg, int profile, const char *input, kiln_dtype dtype, size_t count,
    const void *min, const void *opt, const void *max);

/* Whether network input `input` is a shape tensor: its values decide the
 * shape of some tensor (they reach, through any ops but Shape and Size, an
 * op input such as Reshape's shape, Resize's scales or OneHot's depth), so a
 * build needs them (kiln_builder_config_set_input_values). 1 yes, 0 no (an
 * input whose values only feed data, or that ops read on the host without
 * their shapes following from it: NonMaxSuppression's thresholds, CumSum's
 * axis, Dropout's ratio, Trilu's k), -1 when the network has no such input.
 * An input of the second kind given no values is built with any (its
 * shapes are the same). Added in 0.2. */
KILN_API int kiln_builder_input_is_shape_tensor(const kiln_network *net, const char *input);

/* Calibrators (kiln_builder_config_set_calibration). Added in 0.2. */
typedef enum kiln_calib_algo {
    /* the threshold whose clipped distribution, quantized to 128 levels,
     * differs least (KL divergence) from the 2048-bin histogram of |x|
     * (TensorRT's entropy calibrator) */
    KILN_CALIB_ENTROPY = 0,
    KILN_CALIB_MINMAX = 1,     /* the largest |x| seen */
    KILN_CALIB_PERCENTILE = 2  /* the given percentile of |x| (histogram bin edge) */
} kiln_calib_algo;

/* INT8 calibration (implicit quantization) under KILN_BUILDER_FLAG_INT8, for
 * a network without Q/DQ of its own. With batches given
 * (kiln_builder_config_add_calibration_batch) the build first runs the float
 * network on them (FP32, on the config's backend), takes the values of every
 * activation input of Conv / MatMul / Gemm and gives each one symmetric int8
 * scale (threshold / 127, the threshold from `algo`; `percentile` in (0,
 * 100] is used by KILN_CALIB_PERCENTILE only), and writes them to
 * `cache_path` when it is not NULL: a text file, a '#' comment line then one
 * "tensor: scale" line per tensor. Without batches the scales are read from
 * `cache_path`. The build then inserts QuantizeLinear / DequantizeLinear at
 * those inputs, quantizes the constant weights symmetrically per output
 * channel, and builds the INT8 layers as for a Q/DQ model. Layers whose
 * precision is set to a float type (kiln_builder_config_set_layer_precision,
 * "*" included) stay in float, as do tensors without a scale. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_set_calibration(kiln_builder_config *cfg,
                                                                        kiln_calib_algo algo,
                                                                        double percentile,
                                                                        const char *cache_path);
/* One input's data in calibration batch `batch` (0, 1, ...): every batch
 * needs every network input; `data` (rank/dims in C order, of `dtype`) is
 * copied. The batches' shapes may differ (one profile spans them). Giving a
 * batch turns calibration on (entropy, no cache file, unless
 * kiln_builder_config_set_calibration says otherwise). Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_builder_config_add_calibration_batch(
    kiln_builder_config *cfg, int batch, const char *input, kiln_dtype dtype, int rank,
    const int64_t *dims, const void *data);

/* Build `net` into a serialized plan. On success *plan is a buffer of *size
 * bytes owned by the caller (free with kiln_free). The network is not changed.
 * Progress and timing go to the logger (info). Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_build_serialized(const kiln_network *net,
                                                          const kiln_builder_config *cfg,
                                                          void **plan, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
