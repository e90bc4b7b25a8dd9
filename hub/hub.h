/* Hugging Face Hub client: environment, revision resolution and download
 * into the huggingface_hub cache layout (../shared/docs/hub-protocol.md).
 * Owns: hub/env.c (environment), hub/http.c (libcurl, retries, auth
 * origin rule), hub/download.c (tree listing, blobs, snapshots, refs),
 * hub/partial.c (tensor byte ranges of safetensors shards), hub/upload.c
 * (create, preupload, LFS batch, commit).
 * Never prints; progress goes through the callback. */
#ifndef MTPQ_HUB_HUB_H
#define MTPQ_HUB_HUB_H
#include <stddef.h>
#include <stdint.h>
#include "io/status.h"

struct mtpq_hub_env {
  char endpoint[512]; /* HF_ENDPOINT without trailing '/' */
  char token[512];    /* HF_TOKEN / HUGGING_FACE_HUB_TOKEN / $HF_TOKEN_PATH; "" if none */
  char cache[1024];   /* HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, $HF_HOME/hub */
  int offline;        /* HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE */
  double timeout_s;   /* HF_HUB_DOWNLOAD_TIMEOUT (default 10) */
  double backoff_s;   /* first retry wait (1 s; MTPQ_HUB_BACKOFF_S shortens it for tests) */
  /* Set by the caller (mtpq_hub_env_load leaves it NULL): one line per
   * retry or re-resolve, for a verbose user. */
  void (*note)(void *ud, const char *line);
  void *note_ud;
};
enum mtpq_status mtpq_hub_env_load(struct mtpq_hub_env *env, struct mtpq_err *err);

/* Progress: called with the file being fetched and bytes so far / total. */
typedef void (*mtpq_hub_progress_fn)(void *ud, const char *path, uint64_t done, uint64_t total);

struct mtpq_download_opts {
  const char *repo;     /* "org/name" */
  const char *revision; /* branch, tag or commit; NULL = "main" */
  const char *const *include; /* fnmatch globs; none = every file */
  int ninclude;
  mtpq_hub_progress_fn progress;
  void *progress_ud;
};

struct mtpq_download_result {
  char commit[41];
  char snapshot[1600]; /* $cache/models--org--name/snapshots/<commit> */
  int files;           /* files in the snapshot selection */
  int fetched;         /* of which downloaded now (others were cached) */
  uint64_t bytes_fetched;
  uint64_t bytes_total;
};

/* Resolve the revision to a commit, list the tree, fetch the selected files
 * into blobs/ (resuming blobs/<etag>.incomplete with Range, checking size and
 * sha256 for LFS files or the git blob sha1 otherwise), link them under
 * snapshots/<commit>/ and write refs/<revision>. Offline: serve from the
 * cache only. */
enum mtpq_status mtpq_hub_download(const struct mtpq_hub_env *env, const struct mtpq_download_opts *o,
                                   struct mtpq_download_result *res, struct mtpq_err *err);

struct mtpq_upload_opts {
  const char *dir;      /* local folder (files only, .git and .cache/huggingface skipped) */
  const char *repo;     /* "org/name": created when missing */
  const char *revision; /* branch; NULL = "main" */
  const char *message;  /* commit summary; NULL = "Upload with mtpq" */
  int private_repo;
};
struct mtpq_upload_result {
  char commit[41];
  char url[1024];     /* commitUrl from the server */
  int files;          /* files in the folder */
  int unchanged;      /* dropped: the remote oid equals the local one */
  int lfs_uploaded;   /* LFS objects whose bytes were sent now */
  int lfs_present;    /* LFS objects the server already had (not re-sent) */
  int committed;      /* 0: nothing changed, no commit made */
  uint64_t bytes_sent;
};
/* Create the repo (409 = exists), preupload to classify files, send LFS
 * objects through the batch API (basic or multipart, skipping objects the
 * server has), then one NDJSON commit with parentCommit = the head read
 * first. Retries 408/429/5xx on every call but the commit; a commit that
 * fails is reported, never resent (a 412 means the branch moved: rerun). */
enum mtpq_status mtpq_hub_upload(const struct mtpq_hub_env *env, const struct mtpq_upload_opts *o,
                                 struct mtpq_upload_result *res, struct mtpq_err *err);

/* Tensor-level partial download (hub/partial.c, hub/fetch.c): the repo's
 * small files (config, index, tokenizer, card) through the cache, every
 * *.safetensors shard's header by Range, then o->select chooses among all
 * the shards' tensors and only their bytes are fetched (wanted ranges closer
 * than HUB_GAP_BYTES share a request, at most HUB_FILE_BUDGET requests a
 * shard; each shard resolved once), written as smaller valid shards (same
 * names, offsets re-packed) with the index's weight_map cut to match, under
 * $HF_HUB_CACHE/.mtpq-partial/models--org--name/<commit>-<selection>/
 * (built in a temporary directory, renamed on success; reused when present).
 * select NULL: headers only, each shard kept at its full size as a sparse
 * file whose tensor bytes read as zeros (for inspect: never quantize from
 * such a directory). */
/* names[0, n): every tensor of every shard; config_json: the fetched
 * config.json's path (it may be missing); sets keep[i] for each wanted. */
typedef enum mtpq_status (*mtpq_tensor_select_fn)(void *ud, const char *config_json, const char *const *names, size_t n,
                                                  unsigned char *keep, struct mtpq_err *err);
struct mtpq_partial_opts {
  const char *repo;      /* org/name */
  const char *revision;  /* NULL = main */
  const char *selection; /* names the selection in the cache path */
  mtpq_tensor_select_fn select;
  void *select_ud;
  mtpq_hub_progress_fn progress; /* bytes of the tensor ranges, done / total */
  void *progress_ud;
};
struct mtpq_partial_result {
  char commit[41];
  char dir[1700];
  int cached;              /* the directory existed: nothing was fetched */
  int shards, tensors;     /* shards and tensors kept */
  uint64_t bytes_fetched;  /* small files + headers + tensor ranges */
  uint64_t repo_bytes;     /* every file of the repo at that commit */
  unsigned range_requests; /* ranged GETs for headers and tensors, retries included */
  int resolves;            /* HEADs of a shard's resolve URL (one a shard unless a signed URL expired) */
};
enum mtpq_status mtpq_hub_fetch_partial(const struct mtpq_hub_env *env, const struct mtpq_partial_opts *o,
                                        struct mtpq_partial_result *res, struct mtpq_err *err);
#endif
