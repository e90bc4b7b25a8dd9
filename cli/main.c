/* mtpq entry point: dispatch to a subcommand, global help and version. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "quant/quant.h"

static const struct cli_cmd commands[] = {
    {"inspect", "list tensors, family and MTP layout of a checkpoint", "[options] PATH", inspect_opts, cmd_inspect,
     "PATH is a .safetensors file or a repo directory (sharded through\n"
     "model.safetensors.index.json, or a folder of *.safetensors files), or a\n"
     "Hub id ORG/NAME: then only config.json, the index and each shard's header\n"
     "are fetched (two ranged requests a shard).\n"
     "With --json, prints one JSON object: tensors (name, dtype, shape, bytes,\n"
     "shard), groups, family, mtp {layers, experts, expert_layout}, ...\n"},
    {"quantize", "write the -mtpfp8 drafter repo of a target (FP8/NVFP4 MTP)",
     "TARGET --vocab IDS.safetensors --out DIR [options]", quantize_opts, cmd_quantize,
     "TARGET is a local repo directory, or a Hub id ORG/NAME: then the small files\n"
     "(config, index, tokenizer, README), each shard's header, and only what the\n"
     "recipe reads are fetched: mtp.*, the head (lm_head, or the embedding when\n"
     "tied) and the last trunk layer's expert input_scales; each shard resolved\n"
     "once, nearby ranges in one request, progress on a terminal, retries under\n"
     "-v. HF_HUB_OFFLINE=1 reads the cache only.\n"
     "NVFP4 experts, FP8 draft linears and an FP8 draft head (the lm_head rows\n"
     "of IDS); router, shared-expert gate and norms stay BF16. --dry-run prints\n"
     "the recipe. The repo appears only when complete (built in a hidden\n"
     "temporary directory beside DIR).\n"},
    {"verify-bitexact", "prove byte equality of quantized tensors",
     "[options] A B\n       mtpq verify-bitexact --requantize [options] SOURCE REFERENCE", verify_opts, cmd_verify,
     "Without --requantize, compares two safetensors files or repos tensor by\n"
     "tensor. With --requantize, quantizes every quantized tensor of REFERENCE\n"
     "(NVFP4: X.weight U8 + X.weight_scale F8_E4M3 + X.weight_scale_2 F32; FP8:\n"
     "X.weight F8_E4M3 + X.weight_scale F32) from SOURCE's BF16 X.weight and\n"
     "compares every byte. Exit 0 only if everything is identical; 9 if not.\n"},
    {"build-vocab", "choose the draft vocabulary from token counts and text",
     "--tokenizer tokenizer.json (--counts FILE[:W] | --text FILE)... --out PREFIX [options]", build_vocab_opts,
     cmd_build_vocab,
     "Keeps every added token, every single-character vocabulary string and\n"
     "every token that is exactly one Unicode character, then the most frequent\n"
     "ids (weighted counts; ties to the lower id) up to --size. Writes\n"
     "PREFIX.safetensors (I64 ids, ascending), PREFIX.pt and PREFIX.json with\n"
     "held-out coverage at the chosen size and at 32K/64K/98K/128K.\n"},
    {"tokenize", "token ids of text files (native byte-level BPE)", "--tokenizer tokenizer.json [options] FILE...",
     tokenize_opts, cmd_tokenize,
     "Prints one line of space-separated ids per FILE (no special tokens are\n"
     "added). FILE is plain UTF-8 text or JSON Lines (.jsonl), optionally .zst.\n"},
    {"bench-acceptance", "draft acceptance: stock vs quantized drafters on target traces",
     "--target DIR [--drafter DIR]... --traces FILE [-k N] [options]", bench_accept_opts, cmd_bench_accept,
     "Replays the greedy draft/verify loop over recorded target traces (tokens +\n"
     "final-norm hidden states) with the embedded runtime (--backend, default auto):\n"
     "per-position acceptance, mean acceptance length, drafts and the drafter's\n"
     "time per drafted token and per round, per domain (the trace-name prefix\n"
     "before the first dot) and overall; stock first.\n"},
    {"traces", "record target traces: greedy continuations of prompts by the target model",
     "--target DIR --prompts FILE... --out FILE [-n N] [options]", traces_opts, cmd_traces,
     "Runs the target model (the whole trunk: Gated DeltaNet and full-attention\n"
     "layers, MoE or dense MLP, the final norm and head) on the CPU reference\n"
     "backend over each prompt and N greedy tokens after it, and writes the\n"
     "tokens and the final-norm hidden states in the traces format that\n"
     "bench-acceptance replays. Prompts: a traces file (its prompts), JSON Lines\n"
     "(--text-field, or --chat for \"messages\") or a text file.\n"},
    {"download", "fetch a Hub repo into the huggingface_hub cache", "REPO [--revision R] [--include GLOB]...",
     download_opts, cmd_download,
     "Resolves the revision to a commit, lists the tree and fetches the selected\n"
     "files into $HF_HUB_CACHE (blobs/, snapshots/<commit>/ with relative links,\n"
     "refs/, .locks/) so huggingface_hub finds them offline. Partial blobs\n"
     "(blobs/<etag>.incomplete) resume with Range; LFS files are checked against\n"
     "their sha256, others against their git blob sha1. Retries cut connections,\n"
     "408, 429 (Retry-After / RateLimit honoured) and 5xx. The token (HF_TOKEN,\n"
     "$HF_HOME/token) goes only to HF_ENDPOINT's origin. Prints the snapshot dir.\n"},
    {"upload", "publish a folder to the Hub as one commit", "DIR REPO [--private] [--revision B] [-m TEXT]",
     upload_opts, cmd_upload,
     "Creates REPO if needed, asks the Hub which files go to LFS (preupload),\n"
     "sends LFS objects through the batch API (basic or multipart; objects the\n"
     "server already has are not sent again), then makes one commit on the\n"
     "branch head read at the start (a moved branch gives 412: rerun). Files\n"
     "whose remote oid equals the local one are left out; nothing changed means\n"
     "no commit. Prints the commit URL (--json for pipelines). Needs HF_TOKEN.\n"},
    {"bench-step", "draft-step latency: stock vs quantized drafters vs the HBM floor (table)",
     "--target DIR [--drafter DIR]... [--context N]... [options]", bench_step_opts, cmd_bench_step,
     "Times draft steps (drafter forward + head argmax, fed back) after filling\n"
     "the drafter's KV cache with N pseudo-random positions, and prints the\n"
     "median microseconds, the bytes the step reads, achieved GB/s and % of the\n"
     "HBM bandwidth, the floor bytes/bandwidth and the speedup over stock. With\n"
     "--target-step-ms and --mal it estimates decode tokens/s as\n"
     "MAL / (target step + k x draft step). --batch 1..8 sequences draft\n"
     "together; --json prints the rows for tests/bench/compare.py.\n"},
    {"bench-decode", "live greedy speculative decoding: tokens/s and acceptance, none vs stock vs mtpq (table)",
     "--target DIR [--drafter DIR]... --prompts FILE... [-k N] [-n N] [options]", bench_decode_opts, cmd_bench_decode,
     "Decodes every prompt greedily with the target model in the runtime:\n"
     "without speculation, with the stock drafter (the target's mtp.*) and\n"
     "with each --drafter (k drafts a round, the target verifying k + 1 tokens\n"
     "in one forward). Prints tokens/s, speedups, MAL with a 95% interval,\n"
     "per-position acceptance per domain, where the time went, and whether\n"
     "each output equals the output without speculation (exit 9 if not).\n"},
    {"bench-target", "target decode/verify step and prefill vs the HBM floor (table)",
     "(--target DIR | --synthetic qwen3-next-80b) [--context N]... [--verify T]... [options]", bench_target_opts,
     cmd_bench_target,
     "Times the target model's decode step (one token) and verify steps (T\n"
     "tokens in one forward, the state of each kept) at each context, and the\n"
     "prefill rate of a prompt, with the bytes a step reads at the least and\n"
     "the floor bytes / HBM bandwidth. --synthetic makes a target with random\n"
     "weights in memory (no files): qwen3-next-80b is Qwen3-Next-80B-A3B's shape\n"
     "in NVIDIA's NVFP4 layout (about 50 GB of device memory).\n"},
    {"bench-quant", "quantization throughput: mtpq CPU/GPU (table)", "[options]", bench_quant_opts, cmd_bench_quant,
     "Times NVFP4 and FP8 quantization of a BF16 matrix on 1 thread, all\n"
     "threads and (when built with CUDA and a device is present) the GPU, and\n"
     "prints GB/s of BF16 input. Outputs are checked equal to the reference.\n"},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};

static const struct cli_cmd *find_cmd(const char *name) {
  for (const struct cli_cmd *c = commands; c->name; c++)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}

static void print_main_help(FILE *fp) {
  fputs("Usage: mtpq COMMAND [options] [arguments]\n"
        "       mtpq help COMMAND | mtpq --help | mtpq --version\n\n"
        "Turns the MTP drafter of a Qwen3-Next / Qwen3.5 checkpoint into a fast\n"
        "FP8/NVFP4 drafter repo, verifies its bytes and measures its acceptance.\n\n"
        "Commands:\n",
        fp);
  for (const struct cli_cmd *c = commands; c->name; c++)
    fprintf(fp, "  %-18s %s\n", c->name, c->summary);
  fputs("\nFormats (mtpq help formats):", fp);
  for (int f = 0; f < MTPQ_FMT_COUNT; f++) fprintf(fp, " %s", mtpq_format_get((enum mtpq_format)f)->name);
  fputs("\n\nEvery command accepts -h/--help, -q/--quiet and -v/--verbose.\n"
        "Exit status: see 'mtpq help exit-codes' or mtpq(1). Every option of every\n"
        "command and what it does: 'mtpq help options'.\n",
        fp);
}

static void print_cmd_help(FILE *fp, const struct cli_cmd *c) {
  fprintf(fp, "Usage: mtpq %s %s\n\n%s.\n\n", c->name, c->usage, c->summary);
  if (c->details) fprintf(fp, "%s\n", c->details);
  fputs("Options:\n", fp);
  cli_print_options(fp, c->opts);
}

static int help_main(int argc, char **argv) {
  if (argc < 1) {
    print_main_help(stdout);
    return 0;
  }
  if (strcmp(argv[0], "options") == 0) {
    /* Every long option of every command and what it does: "COMMAND --OPTION  HELP" a line (the first two
     * fields machine-readable: the drift tests read them) */
    for (const struct cli_cmd *c = commands; c->name; c++)
      for (int i = 0; c->opts[i].name; i++)
        printf("%s --%s  %s\n", c->name, c->opts[i].name, c->opts[i].help ? c->opts[i].help : "");
    return 0;
  }
  if (strcmp(argv[0], "formats") == 0) {
    for (int f = 0; f < MTPQ_FMT_COUNT; f++) {
      const struct mtpq_format_info *fi = mtpq_format_get((enum mtpq_format)f);
      printf("%-22s block %-3d %s%s\n    scales: %s\n", fi->name, fi->block, fi->description,
             fi->has_gpu ? " [gpu]" : "", fi->scale_layout);
    }
    return 0;
  }
  if (strcmp(argv[0], "exit-codes") == 0) {
    for (size_t i = 0; i < mtpq_status_count(); i++) {
      enum mtpq_status s = mtpq_status_at(i);
      printf("%-3d %-24s %s\n", mtpq_status_exit_code(s), mtpq_status_name(s),
             mtpq_status_str(s));
    }
    return 0;
  }
  const struct cli_cmd *c = find_cmd(argv[0]);
  if (!c) return cli_usage_error(NULL, "unknown command '%s'", argv[0]);
  print_cmd_help(stdout, c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_main_help(stderr);
    return MTPQ_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
    print_main_help(stdout);
    return 0;
  }
  if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
    printf("mtpq %s\n", MTPQ_VERSION);
    return 0;
  }
  if (strcmp(name, "help") == 0) return help_main(argc - 2, argv + 2);
  const struct cli_cmd *c = find_cmd(name);
  if (!c) return cli_usage_error(NULL, "unknown command '%s'", name);
  /* Commands parse their own options; a --help request prints the help. */
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      print_cmd_help(stdout, c);
      return 0;
    }
  }
  return c->run(argc - 2, argv + 2);
}
