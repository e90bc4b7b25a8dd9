/* CPU-only build of the runtime's CUDA backend: its entry points exist and
 * say why they cannot run. */
#ifndef MTPQ_HAVE_CUDA
#include "kernels/runtime.h"

enum mtpq_status mtpq_gpu_read_gbps(double *gbps, struct mtpq_err *err) {
  *gbps = 0;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}

#include "kernels/runtime_cuda.h"

enum mtpq_status mtpq__cuda_session_open(const struct mtpq_rt_model *d, int64_t max_pos, int window, int nseq,
                                         void **out, struct mtpq_err *err) {
  (void)d, (void)max_pos, (void)window, (void)nseq;
  *out = NULL;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
void mtpq__cuda_session_close(void *g) { (void)g; }
double mtpq__cuda_draft_device_us(void *g) {
  (void)g;
  return -1;
}
enum mtpq_status mtpq__cuda_flush_l2(void *g, struct mtpq_err *err) {
  (void)g;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
void mtpq__cuda_select(void *g, int seq) { (void)g, (void)seq; }
int mtpq__cuda_profile(void *g, int n, const char **names, double *us, int max, struct mtpq_err *err) {
  (void)g, (void)n, (void)names, (void)us, (void)max;
  mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
  return -1;
}
enum mtpq_status mtpq__cuda_draft(void *g, int n, const int32_t *tokens, const float *hidden,
                                  const int64_t *positions, int steps, int32_t *out_tokens, struct mtpq_err *err) {
  (void)g, (void)n, (void)tokens, (void)hidden, (void)positions, (void)steps, (void)out_tokens;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__cuda_step(void *g, int n, const int32_t *tokens, const void *hidden, int hidden_bf16,
                                 const int64_t *positions, float *out_hidden, struct mtpq_err *err) {
  (void)g, (void)n, (void)tokens, (void)hidden, (void)hidden_bf16, (void)positions, (void)out_hidden;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__cuda_head(void *g, const float *hidden, int32_t *tok, float *logits, int on_device,
                                 struct mtpq_err *err) {
  (void)g, (void)hidden, (void)tok, (void)logits, (void)on_device;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
void *mtpq__cuda_alloc(size_t bytes) {
  (void)bytes;
  return NULL;
}
void mtpq__cuda_free(void *p) { (void)p; }
enum mtpq_status mtpq__cuda_copy(void *dst, const void *src, size_t bytes, struct mtpq_err *err) {
  (void)dst, (void)src, (void)bytes;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__cuda_step_at(void *g, int n, const int32_t *tokens, const float *hidden, int bf16,
                                    const int64_t *positions, float *out_hidden, struct mtpq_err *err) {
  (void)g, (void)n, (void)tokens, (void)hidden, (void)bf16, (void)positions, (void)out_hidden;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__cuda_draft_at(void *g, int n, const float *const *hidden, const int64_t *positions, int steps,
                                     int32_t *out_tokens, struct mtpq_err *err) {
  (void)g, (void)n, (void)hidden, (void)positions, (void)steps, (void)out_tokens;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}

#include "kernels/target_cuda.h"

enum mtpq_status mtpq__tcuda_load(struct mtpq_target *t, struct mtpq_err *err) {
  (void)t;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
void mtpq__tcuda_free(struct mtpq_target *t) { (void)t; }
enum mtpq_status mtpq__tcuda_seq_open(struct mtpq_target *t, int64_t max_pos, int nbuf, void **out,
                                      struct mtpq_err *err) {
  (void)t, (void)max_pos, (void)nbuf;
  *out = NULL;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
void mtpq__tcuda_seq_close(void *s) { (void)s; }
enum mtpq_status mtpq__tcuda_forward(void *s, int T, const int32_t *tokens, int64_t pos0, int cur, int head,
                                     float *hidden, float *logits, int32_t *argmax, struct mtpq_err *err) {
  (void)s, (void)T, (void)tokens, (void)pos0, (void)cur, (void)head, (void)hidden, (void)logits, (void)argmax;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__tcuda_forward_many(void *const *s, int n, int Tn, const int32_t *const *tokens,
                                          const int64_t *pos0, const int *cur, int head, float *const *hidden,
                                          float *const *logits, int32_t *const *argmax, struct mtpq_err *err) {
  (void)s, (void)n, (void)Tn, (void)tokens, (void)pos0, (void)cur, (void)head, (void)hidden, (void)logits;
  (void)argmax;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__tcuda_prefill(void *s, int n, const int32_t *tokens, int64_t pos0, int cur, float *hidden,
                                     struct mtpq_err *err) {
  (void)s, (void)n, (void)tokens, (void)pos0, (void)cur, (void)hidden;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__tcuda_seq_gdn(void *s, int layer, int slot, float *conv, float *rec, struct mtpq_err *err) {
  (void)s, (void)layer, (void)slot, (void)conv, (void)rec;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
int mtpq__tcuda_profile(void *s, int T, const char **names, double *us, int max, struct mtpq_err *err) {
  (void)s, (void)T, (void)names, (void)us, (void)max;
  mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
  return -1;
}
double mtpq__tcuda_last_us(void *s) {
  (void)s;
  return -1;
}

#include "kernels/sampler_cuda.h"

enum mtpq_status mtpq__csample_open(int64_t V, int nseq, int rows, int64_t qrows, void **out, float **p, float **q,
                                    struct mtpq_err *err) {
  (void)V, (void)nseq, (void)rows, (void)qrows, (void)p, (void)q;
  *out = NULL;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
void mtpq__csample_close(void *c) { (void)c; }
enum mtpq_status mtpq__csample_copy(float *row, float *host, int64_t V, int to_dev, struct mtpq_err *err) {
  (void)row, (void)host, (void)V, (void)to_dev;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__csample_draft(void *c, int b, int r, const struct mtpq_sampling *sp, double u, int32_t *tok,
                                     struct mtpq_err *err) {
  (void)c, (void)b, (void)r, (void)sp, (void)u, (void)tok;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
enum mtpq_status mtpq__csample_accept(void *c, int n, const int *seq, const int *keff, const int32_t *const *d,
                                      const struct mtpq_sampling *sp, const double *u, int *acc, int32_t *next,
                                      int *used, struct mtpq_err *err) {
  (void)c, (void)n, (void)seq, (void)keff, (void)d, (void)sp, (void)u, (void)acc, (void)next, (void)used;
  return mtpq_err_set(err, MTPQ_E_NO_GPU, "mtpq was built without CUDA");
}
#else
typedef int mtpq_cuda_stub_unused; /* ISO C forbids an empty translation unit */

#endif
