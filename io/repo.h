/* A checkpoint repository: one safetensors file, a directory of shards with
 * model.safetensors.index.json, or a directory of *.safetensors files.
 *
 * The index format is {"metadata": {...}, "weight_map": {"<tensor>":
 * "<shard file>"}}. Shard names must be plain file names in the same
 * directory (no "/", no "..": a hostile index cannot reach other files).
 * Every indexed tensor must exist in its shard and no tensor may appear in two
 * shards. Shards are mapped, not read: lookups are cheap and only the
 * tensors a caller touches are paged in.
 */
#ifndef MTPQ_IO_REPO_H
#define MTPQ_IO_REPO_H

#include "io/safetensors.h"

struct mtpq_repo;

/* path: a .safetensors file or a directory. Free with mtpq_repo_close(). */
enum mtpq_status mtpq_repo_open(const char *path, struct mtpq_repo **out,
                                struct mtpq_err *err);
void mtpq_repo_close(struct mtpq_repo *r); /* NULL-safe */

/* All tensors across shards, sorted by name; borrowed until close. */
size_t mtpq_repo_count(const struct mtpq_repo *r);
const struct mtpq_tensor *mtpq_repo_at(const struct mtpq_repo *r, size_t i);
const struct mtpq_tensor *mtpq_repo_find(const struct mtpq_repo *r, const char *name);

size_t mtpq_repo_shard_count(const struct mtpq_repo *r);
/* File name of shard i (no directory). */
const char *mtpq_repo_shard_name(const struct mtpq_repo *r, size_t i);
const struct mtpq_st_file *mtpq_repo_shard(const struct mtpq_repo *r, size_t i);
/* Directory holding the shards (for a single file: its directory). */
const char *mtpq_repo_dir(const struct mtpq_repo *r);
/* 1 if opened through model.safetensors.index.json. */
int mtpq_repo_indexed(const struct mtpq_repo *r);
/* Sum of tensor bytes. */
uint64_t mtpq_repo_bytes(const struct mtpq_repo *r);

#endif
