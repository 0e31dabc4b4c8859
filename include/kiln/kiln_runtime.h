/* kiln_runtime.h - loading plans into engines and running them through
 * execution contexts. An engine is immutable and may be shared by threads;
 * each thread uses its own execution context. */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_engine kiln_engine;
typedef struct kiln_context kiln_context;

/* What a plan's header says, readable without loading the rest. */
typedef struct kiln_plan_info {
    uint32_t format_version;  /* plan byte layout version */
    uint32_t kiln_version;    /* KILN_VERSION_NUMBER of the builder */
    char backend[16];         /* "cpu" or "cuda" */
    char target[64];          /* device architecture the plan is bound to ("x86_64", "sm_90") */
    char libraries[128];      /* library versions bound into the plan, "name=ver;..." */
    uint64_t file_size;       /* whole plan size in bytes */
} kiln_plan_info;

/* Read the header of a plan (at least the first 256 bytes of it, or all of
 * it). Fails with KILN_ERR_PLAN when the bytes are not a kiln plan. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_plan_read_info(const void *data, size_t size,
                                                        kiln_plan_info *info);

/* Load a plan from memory (copied) or from a file (mapped). Checks the header,
 * checksum, version and target before any other work. *out set only on
 * success. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_engine_load(const void *data, size_t size,
                                                     kiln_engine **out);
KILN_API KILN_NODISCARD kiln_status kiln_engine_load_file(const char *path, kiln_engine **out);
/* Accepts NULL. The engine must outlive its contexts. Added in 0.1. */
KILN_API void kiln_engine_destroy(kiln_engine *engine);

typedef enum kiln_io_mode { KILN_IO_NONE = 0, KILN_IO_INPUT = 1, KILN_IO_OUTPUT = 2 } kiln_io_mode;

/* The engine's I/O tensors: inputs first, then outputs. Strings are borrowed
 * from the engine. Added in 0.1. */
KILN_API int kiln_engine_num_io_tensors(const kiln_engine *engine);
KILN_API const char *kiln_engine_io_tensor_name(const kiln_engine *engine, int index);
KILN_API kiln_io_mode kiln_engine_tensor_io_mode(const kiln_engine *engine, const char *name);
KILN_API kiln_dtype kiln_engine_tensor_dtype(const kiln_engine *engine, const char *name);
/* 1 when `name` is a shape-tensor input (TensorRT's isShapeInferenceIO): its
 * values decide shapes, so they are read on the host and its address must
 * be host memory even for a GPU engine; else 0. Added in 0.2. */
KILN_API int kiln_engine_tensor_is_shape_input(const kiln_engine *engine, const char *name);
/* Shape as built: dynamic dims are -1. Returns the rank, or -1 if no such tensor. */
KILN_API int kiln_engine_tensor_shape(const kiln_engine *engine, const char *name, int64_t *dims);
KILN_API int kiln_engine_num_profiles(const kiln_engine *engine);
/* min/opt/max shape of an input in a profile; any pointer may be NULL. */
KILN_API KILN_NODISCARD kiln_status kiln_engine_profile_shape(const kiln_engine *engine,
                                                              int profile, const char *input,
                                                              int *rank, int64_t *min,
                                                              int64_t *opt, int64_t *max);

/* Layers after fusion, for inspection and profiling. Borrowed strings. */
KILN_API int kiln_engine_num_layers(const kiln_engine *engine);
KILN_API const char *kiln_engine_layer_name(const kiln_engine *engine, int layer);
KILN_API const char *kiln_engine_layer_op(const kiln_engine *engine, int layer);
KILN_API const char *kiln_engine_layer_tactic(const kiln_engine *engine, int layer);
/* JSON text describing every layer (inputs, outputs, types, tactic) and the
 * memory plan. Caller frees with kiln_free. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_engine_layer_info_json(const kiln_engine *engine,
                                                                char **json);

/* Make an execution context with its own activation memory. *out set only on
 * success. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_create(kiln_engine *engine, kiln_context **out);
/* Accepts NULL. Added in 0.1. */
KILN_API void kiln_context_destroy(kiln_context *ctx);

/* Choose the optimization profile (default 0). Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_set_profile(kiln_context *ctx, int profile);
/* Set the shape of an input; it must lie inside the profile. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_set_input_shape(kiln_context *ctx,
                                                                 const char *name, int rank,
                                                                 const int64_t *dims);
/* Shape of any I/O tensor for the current input shapes. For outputs whose size
 * depends on data, valid after execution. Returns the rank, or -1 with a
 * message when it cannot be known (an input shape is unset). Added in 0.1. */
KILN_API int kiln_context_tensor_shape(kiln_context *ctx, const char *name, int64_t *dims);
/* 1 when, for the current input shapes, every output's shape that
 * kiln_context_tensor_shape gives before a run is the one the run makes (so
 * caller memory of that size can be bound to the outputs first); 0 when some
 * layer's output shape depends on data (NonZero, ...), so shapes before a
 * run are upper bounds; -1 with a message when an input shape is unset.
 * Added in 0.3. */
KILN_API int kiln_context_output_shapes_exact(kiln_context *ctx);
/* Bind caller memory to an I/O tensor (borrowed until rebound or the context
 * is destroyed). An output left unbound is allocated by the context; find it
 * with kiln_context_tensor_address after execution. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_set_tensor_address(kiln_context *ctx,
                                                                    const char *name, void *data);
KILN_API void *kiln_context_tensor_address(kiln_context *ctx, const char *name);

/* Sequence and optional I/O (CPU engines; added in 0.3). An I/O value is a
 * tensor, a sequence of tensors, or an optional (of a tensor or of such a
 * sequence). kiln_engine_tensor_dtype of a sequence or optional answers its
 * element type. */
typedef enum kiln_tensor_kind {
    KILN_TENSOR_KIND_TENSOR = 0,
    KILN_TENSOR_KIND_SEQUENCE = 1,
    KILN_TENSOR_KIND_OPTIONAL = 2
} kiln_tensor_kind;
/* The kind of an I/O value, or -1 when there is no such tensor. */
KILN_API int kiln_engine_tensor_kind(const kiln_engine *engine, const char *name);
/* What an optional I/O value holds: KILN_TENSOR_KIND_SEQUENCE for an
 * optional of a sequence, else KILN_TENSOR_KIND_TENSOR (also for a tensor
 * or a sequence, whose elements are tensors); -1 when there is no such
 * tensor. Added in 0.3. */
KILN_API int kiln_engine_tensor_element_kind(const kiln_engine *engine, const char *name);
/* Give a sequence input `count` tensors of the input's element type (element
 * i: ranks[i], dims[i], bytes at data[i], copied now), or an optional input
 * its element: count 1 (a tensor) or, for an optional of a sequence, the
 * sequence's count tensors. */
KILN_API KILN_NODISCARD kiln_status kiln_context_set_sequence_input(
    kiln_context *ctx, const char *name, int count, const int *ranks, const int64_t *const *dims,
    const void *const *data);
/* Make an optional input hold no element. */
KILN_API KILN_NODISCARD kiln_status kiln_context_set_optional_none(kiln_context *ctx,
                                                                  const char *name);
/* After a run: the tensors of a sequence output (or of the sequence an
 * optional output holds), 0 or 1 for an optional of a tensor, -1 with a
 * message on error. */
KILN_API int64_t kiln_context_sequence_length(kiln_context *ctx, const char *name);
/* After a run: 1 when an optional output holds an element (a tensor or a
 * sequence, perhaps empty), 0 when it holds none, -1 with a message when
 * `name` is not an optional or has not run. Added in 0.3. */
KILN_API int kiln_context_optional_has_element(kiln_context *ctx, const char *name);
/* Element i of a sequence or optional output after a run: its type, shape
 * (dims: KILN_MAX_DIMS entries) and bytes, valid until the next run. */
KILN_API KILN_NODISCARD kiln_status kiln_context_sequence_element(kiln_context *ctx,
                                                                 const char *name, int64_t i,
                                                                 kiln_dtype *dtype, int *rank,
                                                                 int64_t *dims,
                                                                 const void **data);

/* Run the network once. On the CPU this returns when outputs are ready; on a
 * GPU backend it enqueues on `stream` (a cudaStream_t, NULL for the default
 * stream) and returns. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_enqueue(kiln_context *ctx, void *stream);

/* CPU threads this context's layers use (0 = the default: KILN_NUM_THREADS,
 * else one per core). Takes effect at the next run. Added in 0.1. */
KILN_API void kiln_context_set_threads(kiln_context *ctx, int threads);

/* GPU backends capture a context's work into a CUDA graph once per input
 * shapes and tensor addresses and replay it (default on); 0 turns that off
 * (trtexec's --noCudaGraph). No effect on the CPU. Added in 0.1. */
KILN_API void kiln_context_set_graphs(kiln_context *ctx, int enabled);

/* Wait until work enqueued on `stream` is done (no-op on the CPU). Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_synchronize(kiln_context *ctx, void *stream);

/* What this process's `backend` ("cpu", "cuda") binds plans to: its target
 * ("x86_64", "sm_90") and library versions, the values a plan's header must
 * match (kiln doctor compares them). Fails when the backend is not in this
 * build or has no usable device. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_backend_describe(const char *backend, char *target,
                                                          size_t target_cap, char *libraries,
                                                          size_t libraries_cap);

/* The backend an engine runs on: "cpu" or "cuda". Borrowed. Added in 0.1. */
KILN_API const char *kiln_engine_backend(const kiln_engine *engine);

/* Memory where an engine's tensors live (device memory for a GPU engine, host
 * memory for a CPU engine), so callers need no CUDA headers. Free with
 * kiln_engine_free. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_engine_alloc(const kiln_engine *engine, size_t bytes,
                                                      void **out);
KILN_API void kiln_engine_free(const kiln_engine *engine, void *ptr);
/* Host memory for an engine's inputs and outputs: page-locked (pinned) for
 * a GPU engine, so copies to and from the device run at full speed and can
 * be asynchronous; plain 64-byte aligned memory for a CPU engine. Free with
 * kiln_engine_free_host. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_engine_alloc_host(const kiln_engine *engine, size_t bytes,
                                                           void **out);
KILN_API void kiln_engine_free_host(const kiln_engine *engine, void *ptr);
typedef enum kiln_copy_direction {
    KILN_COPY_TO_DEVICE = 0,
    KILN_COPY_TO_HOST = 1,
    KILN_COPY_ON_DEVICE = 2
} kiln_copy_direction;
/* Synchronous copy between host and engine memory. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_engine_copy(const kiln_engine *engine, void *dst,
                                                     const void *src, size_t bytes,
                                                     kiln_copy_direction dir);

/* Streams and events of an engine's backend, so that a caller can overlap
 * copies with runs and time them without CUDA headers (kiln exec does).
 *
 * A stream is a cudaStream_t on a GPU backend (non-blocking, private to the
 * caller); a CPU engine has no streams and gives NULL, which every call
 * taking a stream accepts. kiln_engine_copy_async enqueues a copy on
 * `stream` (host memory from kiln_engine_alloc_host for a GPU engine, else
 * the copy may run synchronously); on the CPU it copies at once.
 *
 * An event marks a point in a stream: kiln_event_record places it after the
 * work enqueued so far; kiln_event_done says whether that work has
 * finished (1), not yet (0) or failed (-1, kiln_last_error says why);
 * kiln_event_synchronize waits for it without spinning; and
 * kiln_event_elapsed_ms gives the milliseconds between two recorded
 * events once both are done. On the CPU an event holds the host's
 * monotonic time when it was recorded. Added in 0.2. */
typedef struct kiln_event kiln_event;
KILN_API KILN_NODISCARD kiln_status kiln_engine_stream_create(const kiln_engine *engine,
                                                              void **stream);
KILN_API void kiln_engine_stream_destroy(const kiln_engine *engine, void *stream);
KILN_API KILN_NODISCARD kiln_status kiln_engine_copy_async(const kiln_engine *engine, void *dst,
                                                           const void *src, size_t bytes,
                                                           kiln_copy_direction dir, void *stream);
KILN_API KILN_NODISCARD kiln_status kiln_event_create(const kiln_engine *engine,
                                                      kiln_event **out);
KILN_API void kiln_event_destroy(kiln_event *event);
KILN_API KILN_NODISCARD kiln_status kiln_event_record(kiln_event *event, void *stream);
KILN_API int kiln_event_done(kiln_event *event);
KILN_API KILN_NODISCARD kiln_status kiln_event_synchronize(kiln_event *event);
KILN_API KILN_NODISCARD kiln_status kiln_event_elapsed_ms(const kiln_event *start,
                                                          const kiln_event *end, double *ms);

/* Per-layer timing. When on, every run records each layer's time. Added in 0.1. */
KILN_API void kiln_context_set_profiling(kiln_context *ctx, int enabled);
/* Total time spent in layer `layer` over all profiled runs (ms) and the run
 * count. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_context_layer_time(const kiln_context *ctx, int layer,
                                                            double *total_ms, uint64_t *runs);

#ifdef __cplusplus
}
#endif
#endif
