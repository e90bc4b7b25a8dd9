/* Files compiled into the library (the vLLM plugin mtpq ships with every
 * drafter repo). The table ends with a NULL path. */
#ifndef MTPQ_QUANT_EMBEDDED_H
#define MTPQ_QUANT_EMBEDDED_H

#include <stddef.h>

struct mtpq_embedded_file {
  const char *path; /* relative, e.g. "mtpq_vllm/patch.py" */
  const unsigned char *bytes;
  size_t len;
};

extern const struct mtpq_embedded_file mtpq_vllm_plugin_files[];

#endif
