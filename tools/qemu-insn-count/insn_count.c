/* A qemu-user (TCG) plugin that counts the guest instructions a program retires, for
 * scripts/arm64-insn-count.sh: a benchmark tool, not part of qrun. Written against QEMU's
 * public plugin API (include/qemu/qemu-plugin.h, which stays outside this repository);
 * build it with tools/qemu-insn-count/build.sh QEMU_SOURCE_TREE.
 *
 * Counting: when a translation block is translated, an inline "add n" (n: the block's
 * instruction count) is attached to it, so executing the block costs one add and no call.
 * A block left early (a fault, a signal) still counts in full; mode=insn attaches an add of
 * one to every instruction instead, so only the instructions reached count, but is slower. The
 * counter is one shared uint64_t: exact for a guest with one running thread (the benchmarks run
 * with -t 1); with several threads running at once, concurrent adds can be lost.
 *
 * Arguments (-plugin libinsn_count.so,arg=value,...):
 *   out=FILE     write "insns N" to FILE at exit (default: to stderr)
 *   mode=tb|insn per-block (default) or per-instruction counting
 *   syms=FILE    also count per symbol of the main binary (the one of each block's first
 *                instruction, qemu_plugin_insn_symbol; "?" outside it, such as in shared
 *                libraries) and write "count symbol" lines to FILE, largest first. One more
 *                inline add per block; plugin API 1 only (QEMU < 9.0).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu/qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static uint64_t insn_count;
static int per_insn;
static char out_path[4096];
static char syms_path[4096];

/* Per-symbol counters, an open-addressing table keyed by the symbol's name pointer (QEMU
 * returns the same pointer for every instruction of a symbol). */
enum { kMaxSymbols = 1 << 16 };
struct SymbolCount {
  const char* name;
  uint64_t count;
};
static struct SymbolCount symbols[kMaxSymbols];
static struct SymbolCount unknown_symbol = {"?", 0};

static struct SymbolCount* symbol_entry(const char* name) {
  if (name == NULL) return &unknown_symbol;
  size_t i = ((uintptr_t)name >> 3) & (kMaxSymbols - 1);
  for (size_t probes = 0; probes < kMaxSymbols; ++probes, i = (i + 1) & (kMaxSymbols - 1)) {
    if (symbols[i].name == name) return &symbols[i];
    if (symbols[i].name == NULL) {
      symbols[i].name = name;
      return &symbols[i];
    }
  }
  return &unknown_symbol; /* full: counted as unknown */
}

static int by_count_desc(const void* a, const void* b) {
  const uint64_t x = ((const struct SymbolCount*)a)->count;
  const uint64_t y = ((const struct SymbolCount*)b)->count;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void write_symbols(void) {
  FILE* f = fopen(syms_path, "w");
  if (!f) {
    fprintf(stderr, "insn_count: cannot write %s\n", syms_path);
    return;
  }
  size_t n = 0;
  for (size_t i = 0; i < kMaxSymbols; ++i) {
    if (symbols[i].name != NULL && symbols[i].count > 0) symbols[n++] = symbols[i];
  }
  if (unknown_symbol.count > 0) symbols[n++] = unknown_symbol;
  qsort(symbols, n, sizeof symbols[0], by_count_desc);
  for (size_t i = 0; i < n; ++i) fprintf(f, "%" PRIu64 " %s\n", symbols[i].count, symbols[i].name);
  fclose(f);
}

#if QEMU_PLUGIN_VERSION >= 2
/* API 2 dropped the inline ops on a plain pointer for per-vCPU scoreboards. */
static struct qemu_plugin_scoreboard* counts;
static qemu_plugin_u64 count_entry;
#endif

static void add_inline_tb(struct qemu_plugin_tb* tb, uint64_t n) {
#if QEMU_PLUGIN_VERSION >= 2
  qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, count_entry, n);
#else
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insn_count, n);
#endif
}

static void add_inline_insn(struct qemu_plugin_insn* insn) {
#if QEMU_PLUGIN_VERSION >= 2
  qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64, count_entry,
                                                      1);
#else
  qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &insn_count, 1);
#endif
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  const size_t n = qemu_plugin_tb_n_insns(tb);
#if QEMU_PLUGIN_VERSION < 2
  if (syms_path[0] && n > 0) {
    struct SymbolCount* e = symbol_entry(qemu_plugin_insn_symbol(qemu_plugin_tb_get_insn(tb, 0)));
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &e->count, n);
  }
#endif
  if (!per_insn) {
    add_inline_tb(tb, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) add_inline_insn(qemu_plugin_tb_get_insn(tb, i));
}

static void at_exit(qemu_plugin_id_t id, void* userdata) {
#if QEMU_PLUGIN_VERSION >= 2
  insn_count = qemu_plugin_u64_sum(count_entry);
  qemu_plugin_scoreboard_free(counts);
#endif
  char line[64];
  snprintf(line, sizeof line, "insns %" PRIu64 "\n", insn_count);
  FILE* f = out_path[0] ? fopen(out_path, "w") : NULL;
  if (out_path[0] && !f) fprintf(stderr, "insn_count: cannot write %s\n", out_path);
  fputs(line, f ? f : stderr);
  if (f) fclose(f);
  if (syms_path[0]) write_symbols();
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc,
                                           char** argv) {
  for (int i = 0; i < argc; ++i) {
    const char* arg = argv[i];
    if (strncmp(arg, "out=", 4) == 0 && strlen(arg + 4) < sizeof out_path) {
      strcpy(out_path, arg + 4);
    } else if (strncmp(arg, "syms=", 5) == 0 && strlen(arg + 5) < sizeof syms_path) {
#if QEMU_PLUGIN_VERSION >= 2
      fprintf(stderr, "insn_count: syms= needs plugin API 1 (QEMU < 9.0)\n");
      return -1;
#endif
      strcpy(syms_path, arg + 5);
    } else if (strcmp(arg, "mode=insn") == 0) {
      per_insn = 1;
    } else if (strcmp(arg, "mode=tb") == 0) {
      per_insn = 0;
    } else {
      fprintf(stderr, "insn_count: unknown argument '%s' (out=FILE, mode=tb|insn, syms=FILE)\n",
              arg);
      return -1;
    }
  }
#if QEMU_PLUGIN_VERSION >= 2
  counts = qemu_plugin_scoreboard_new(sizeof(uint64_t));
  count_entry = qemu_plugin_scoreboard_u64(counts);
#endif
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, at_exit, NULL);
  return 0;
}
