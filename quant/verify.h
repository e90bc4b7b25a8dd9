/* Byte-level verification of quantized checkpoints.
 *
 * Compare mode: two files or repos, tensor by tensor over the union of
 * names: identical, differing (with counts and the first mismatches decoded
 * in the tensor's number format), missing on one side, or different
 * dtype/shape.
 *
 * Requantize mode: for every quantized tensor X of REFERENCE
 *   NVFP4: X.weight U8 + X.weight_scale F8_E4M3 + X.weight_scale_2 F32
 *   FP8:   X.weight F8_E4M3 + X.weight_scale F32 (and no weight_scale_2)
 * quantize SOURCE's BF16 X.weight (or the matching expert slice of a fused
 * `experts.gate_up_proj` [E, 2I, H] / `experts.down_proj` [E, H, I]) with
 * mtpq's reference (or GPU) quantizer and compare every byte of the weight
 * and its scales. NVFP4 siblings (same parent module) whose weight_scale_2
 * are bit-equal in REFERENCE form a group and share one amax, as ModelOpt's
 * fused gate/up and q/k/v do. input_scale is calibration data and is not
 * compared.
 */
#ifndef MTPQ_QUANT_VERIFY_H
#define MTPQ_QUANT_VERIFY_H

#include "quant/quant.h"

enum mtpq_verify_result {
  MTPQ_VERIFY_IDENTICAL,
  MTPQ_VERIFY_DIFFERS,
  MTPQ_VERIFY_ONLY_A,     /* missing from B (or from SOURCE in requantize mode) */
  MTPQ_VERIFY_ONLY_B,
  MTPQ_VERIFY_LAYOUT,     /* dtype or shape differ */
};

#define MTPQ_VERIFY_MAX_FIRST 8

struct mtpq_mismatch {
  char part[24];       /* "weight", "weight_scale", "weight_scale_2", or "" */
  uint64_t index;      /* element index within the part */
  int64_t row, col;    /* for rank-2 parts, else -1 */
  uint64_t a_bits, b_bits;
  double a_val, b_val; /* decoded values (NaN where undefined) */
};

struct mtpq_verify_tensor {
  char *name;
  const char *kind;    /* "nvfp4", "fp8", or a dtype name */
  enum mtpq_verify_result result;
  uint64_t bytes;          /* bytes compared */
  uint64_t bytes_differ;
  uint64_t elements;       /* elements compared (NVFP4: codes) */
  uint64_t elements_differ;
  int max_code_distance;   /* quantized codes: ordinal distance; floats: ULPs */
  size_t n_first;
  struct mtpq_mismatch first[MTPQ_VERIFY_MAX_FIRST];
  char note[200];          /* layout / missing detail */
};

struct mtpq_verify_report {
  size_t n;
  struct mtpq_verify_tensor *t;
  size_t identical, differ, missing, layout;
};

struct mtpq_verify_opts {
  enum mtpq_arith arith;
  enum mtpq_format fp8_format; /* MTPQ_FMT_FP8 (default) or a ModelOpt recipe */
  int use_gpu;
  int threads;
};

struct mtpq_verify_opts mtpq_verify_default_opts(void);

/* The recipe an mtpq repo was made with, from its mtpq_manifest.json: the
 * torch arithmetic ("arith") and the draft linears' FP8 format
 * (recipe.draft_linears) into o. *found: 0 when dir has no manifest (a
 * ModelOpt or other reference: o untouched); a manifest naming an unknown
 * arithmetic or format is an error naming the file and the value. */
enum mtpq_status mtpq_verify_manifest_recipe(const char *dir, struct mtpq_verify_opts *o, int *found,
                                             struct mtpq_err *err);

/* Both return MTPQ_OK when the comparison ran (whatever it found); the
 * report says what differs. Free the report with mtpq_verify_report_free. */
enum mtpq_status mtpq_verify_compare(const char *a, const char *b,
                                     const struct mtpq_verify_opts *o,
                                     struct mtpq_verify_report **out, struct mtpq_err *err);
enum mtpq_status mtpq_verify_requantize(const char *source, const char *reference,
                                        const struct mtpq_verify_opts *o,
                                        struct mtpq_verify_report **out, struct mtpq_err *err);
void mtpq_verify_report_free(struct mtpq_verify_report *r);

const char *mtpq_verify_result_name(enum mtpq_verify_result r);

#endif
