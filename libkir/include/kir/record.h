/* kir recording: the app's side (hooks.h API 8). Include it in an app to say how
 * a device buffer's contents may differ when a recorded launch is replayed, or a
 * tuned variant of it verified: per buffer, its element type and a tolerance
 * (absolute, relative or in units in the last place).
 *
 *   #include <kir/record.h>
 *   kir_record_annotation a = KIR_RECORD_ANNOTATION_INIT;
 *   a.dtype = KIR_DTYPE_F32, a.kind = KIR_TOLERANCE_ULP, a.threshold = 4, a.tag = "out";
 *   kir_record_annotate_if_recording(d_out, &a);
 *
 * The annotation belongs to the live device allocation that holds `device_ptr`
 * (the one the hook layer tracks): every later record stores it with that
 * allocation's region (the record format's `tolerance`, docs/record-format.md),
 * and `kir replay` and `kir tune` verify the region with it unless the command
 * line gives a tolerance. Annotating again replaces it; freeing the allocation
 * drops it. This follows Mneme's annotation API (include/mneme/MnemeAnnotation.hpp,
 * mneme::annotate(ptr, Metadata{builtin, threshold, threshold_kind, norm, tag}),
 * and src/MnemeAnnotation.cpp, annotate_impl, which calls the recorder through a
 * weak symbol), with ULP as a third kind.
 *
 * kir_record_annotate is exported by libkir_hook.so (LD_PRELOADed by `kir record`);
 * the declaration below is weak, so an app built with this header runs without
 * kir (the symbol is then NULL): call it through kir_record_annotate_if_recording. */
#ifndef KIR_RECORD_H
#define KIR_RECORD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kir_record_annotation.dtype: the buffer's elements. */
#define KIR_DTYPE_F16 1
#define KIR_DTYPE_BF16 2
#define KIR_DTYPE_F32 3
#define KIR_DTYPE_F64 4

/* kir_record_annotation.kind: what `threshold` bounds. */
#define KIR_TOLERANCE_ABS 0 /* norm(actual - recorded) <= threshold */
#define KIR_TOLERANCE_REL 1 /* norm(actual - recorded) <= threshold * norm(recorded) */
#define KIR_TOLERANCE_ULP 2 /* per element, at most `threshold` units in the last place (an integer) */

/* kir_record_annotation.norm (ABS and REL): how the difference is aggregated. */
#define KIR_NORM_LINF 0
#define KIR_NORM_L1 1
#define KIR_NORM_L2 2

typedef struct kir_record_annotation {
  uint32_t struct_size; /* sizeof(kir_record_annotation) as the app was compiled */
  uint32_t dtype;       /* KIR_DTYPE_* */
  uint32_t kind;        /* KIR_TOLERANCE_* */
  uint32_t norm;        /* KIR_NORM_* */
  double threshold;     /* >= 0; ULP: a whole number */
  const char* tag;      /* optional: a name for reports (copied), NULL for none */
} kir_record_annotation;

#define KIR_RECORD_ANNOTATION_INIT \
  {sizeof(kir_record_annotation), KIR_DTYPE_F32, KIR_TOLERANCE_ABS, KIR_NORM_LINF, 0.0, 0}

/* kir_record_annotate's results. */
#define KIR_ANNOTATE_OK 0
#define KIR_ANNOTATE_INVALID 1       /* a NULL argument, an unknown dtype/kind/norm, a bad threshold */
#define KIR_ANNOTATE_NO_ALLOCATION 2 /* no live device allocation holds device_ptr */

/* Annotate the device allocation holding `device_ptr`: KIR_ANNOTATE_*. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(KIR_RECORD_DEFINING) /* the hook defines it */
__attribute__((weak))
#endif
int kir_record_annotate(const void* device_ptr, const kir_record_annotation* annotation);

#ifndef KIR_RECORD_DEFINING
/* kir_record_annotate when the process runs under kir's hook layer; else
 * KIR_ANNOTATE_OK and nothing. */
static inline int kir_record_annotate_if_recording(const void* device_ptr, const kir_record_annotation* annotation) {
  return kir_record_annotate ? kir_record_annotate(device_ptr, annotation) : KIR_ANNOTATE_OK;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* KIR_RECORD_H */
