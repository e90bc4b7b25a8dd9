/* libFuzzer: config.json into the model configuration (io/config.c). */
#include "fuzz_util.h"
#include "io/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct mtpq_model_config cfg;
  struct mtpq_err err = {0};
  if (mtpq_config_parse((const char *)data, size, "fuzz", &cfg, &err) == MTPQ_OK) mtpq_config_free(&cfg);
  return 0;
}
