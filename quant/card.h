/* The model card's evidence (issue 51): what a person needs to judge a
 * drafter before serving it, written into README.md by mtpq quantize.
 *   - Measured acceptance, from a bench-acceptance or bench-decode --json
 *     report: stock vs this drafter per domain with 95% intervals, the
 *     paired difference, first-draft agreement, the traces or prompts used.
 *     A report is tied to the weights it measured: bench reports record
 *     each drafter's weight digests (mtpq_drafter_digests, from its
 *     manifest) and the card takes only a report whose digests equal the
 *     files quantize has just written (quantization is deterministic, so a
 *     repo measured and then made again with --acceptance has them).
 *   - The draft vocabulary's provenance: build-vocab's PREFIX.json beside
 *     the ids file (corpora, weights, size, held-out coverage).
 *   - The command that made the repo.
 */
#ifndef MTPQ_QUANT_CARD_H
#define MTPQ_QUANT_CARD_H

#include <cjson/cJSON.h>

#include "io/status.h"
#include "quant/drafter.h"

/* {"FILE": "sha256", ...} of a drafter repo's .safetensors files (shards
 * and the ids file): from its mtpq_manifest.json (from_manifest 1; NULL
 * with no error when there is none: not an mtpq repo) or hashed now (0). */
cJSON *mtpq_drafter_digests(const char *dir, int from_manifest, struct mtpq_err *err);

/* Whether FILE is a report the card can take (read, parsed, of a known
 * form, not a throughput run), before the work: the weights are checked
 * when the repo is written. */
enum mtpq_status mtpq_card_report_check(const char *file, struct mtpq_err *err);

/* The card's evidence sections for the repo being written in dir, as
 * markdown (*md: a new string, "" when there is nothing to add). A report
 * that measured other weights, a throughput run (acceptance replayed, not
 * measured) or a report of no known form is an error naming the file. */
enum mtpq_status mtpq__card_evidence(const struct mtpq_drafter_params *p, const char *dir, char **md,
                                     struct mtpq_err *err);

/* Give the card of the mtpq drafter repo in dir the id repo (its title and
 * the vllm serve line's "model"), rewriting README.md and the README.md
 * entry of mtpq_manifest.json when the id differs. *changed: 1 when
 * rewritten, old (old_cap bytes) the id it had; 0 with nothing done when
 * dir holds no mtpq_manifest.json (not an mtpq repo) or its card has no
 * such lines. */
enum mtpq_status mtpq_card_set_repo_id(const char *dir, const char *repo, int *changed, char *old, size_t old_cap,
                                       struct mtpq_err *err);

#endif
