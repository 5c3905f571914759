/* The C API of a model exported by polytc (polytc.aot; docs/export.md).

   A model takes its inputs and writes its outputs as dense, C-ordered arrays of the dtypes
   and shapes the functions below describe.  Where the model has symbolic dimensions (a
   batch N), their values are an argument of every run (in the order of
   polytc_model_dim_name); the input shapes and output shapes follow from them.

     polytc_model *m = polytc_model_create(0);          // 0: OpenMP's default threads
     int64_t dims[] = {8};                               // N = 8
     const void *in[] = {x};                             // inputs, in graph order
     void *out[] = {y};                                  // caller-allocated outputs
     if (polytc_model_run(m, dims, in, out))
       fprintf(stderr, "%s\n", polytc_model_error(m));
     polytc_model_destroy(m);

   A model object holds its own memory (grown at a run with larger dimensions): runs of one
   object must not overlap; separate objects may run concurrently.  Output buffers need no
   alignment; misaligned inputs are copied where a kernel wants them aligned.  Errors: a
   run returns non-zero and polytc_model_error says what went wrong (a negative code: the
   call; a positive one: a run-time check of a kernel, e.g. an index out of range). */
#ifndef POLYTC_MODEL_H
#define POLYTC_MODEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef POLYTC_API
#define POLYTC_API __attribute__((visibility("default")))
#endif

typedef struct polytc_model polytc_model;

/* A model ready to run on num_threads OpenMP threads (0: OpenMP's default); NULL when out
   of memory.  Cheap: buffers are allocated at the first run. */
POLYTC_API polytc_model *polytc_model_create(int num_threads);
POLYTC_API void polytc_model_destroy(polytc_model *m);
POLYTC_API void polytc_model_set_threads(polytc_model *m, int num_threads);

/* Run the model: dims holds the symbolic dimensions' values (NULL when it has none),
   inputs[i] points to input i, outputs[j] to a buffer of output j's size
   (polytc_model_output_shape).  0 on success. */
POLYTC_API int polytc_model_run(polytc_model *m, const int64_t *dims,
                                const void *const *inputs, void *const *outputs);
/* What went wrong in the last failed run. */
POLYTC_API const char *polytc_model_error(const polytc_model *m);

/* The symbolic dimensions. */
POLYTC_API int polytc_model_num_dims(void);
POLYTC_API const char *polytc_model_dim_name(int j);

/* Inputs and outputs: names, numpy dtype strings ("<f4", "<i8", "|b1"), ranks. */
POLYTC_API int polytc_model_num_inputs(void);
POLYTC_API const char *polytc_model_input_name(int i);
POLYTC_API const char *polytc_model_input_dtype(int i);
POLYTC_API int polytc_model_input_rank(int i);
/* The extent of an input's axis: >= 0 when fixed, -(j + 1) for symbolic dimension j. */
POLYTC_API int64_t polytc_model_input_dim(int i, int axis);
POLYTC_API int polytc_model_num_outputs(void);
POLYTC_API const char *polytc_model_output_name(int j);
POLYTC_API const char *polytc_model_output_dtype(int j);
POLYTC_API int polytc_model_output_rank(int j);
/* Output j's shape at the dimensions dims (NULL when the model has none). */
POLYTC_API int polytc_model_output_shape(int j, const int64_t *dims, int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
