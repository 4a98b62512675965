// `qrun serve -m MODEL`: an OpenAI-compatible HTTP server (cli/serve/). Loads the model once
// (its scratch sized for -b tokens of -np sequences per step), makes -c tokens of KV cache
// (one paged pool all sequences share, or -np equal slots where the backend cannot read
// paged views), starts the engine thread that batches them (core/batch_scheduler.h), binds
// --host:--port (127.0.0.1:8080 by default; port 0 picks a free one), prints the address on
// stderr, and serves until SIGINT or SIGTERM, which stop running generations and exit 0.
// SIGINT and SIGTERM are blocked in every thread and taken by one thread with sigtimedwait, so
// no handler runs on an HTTP or kernel thread.
#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>

#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/chat_template_flags.h"
#include "cli/commands.h"
#include "cli/sampling_flags.h"
#include "cli/serve/server.h"
#include "cli/session.h"
#include "cli/text_file.h"
#include "core/jinja/chat_template.h"
#include "core/kv_block_pool.h"

namespace qrun::cli {
namespace {

struct ServeOptions {
  ModelFlags model;
  SamplingFlags sampling;
  std::string host = "127.0.0.1";
  int port = 8080;
  int n_parallel = 1;
  bool kv_unified = true;  // paged KV shared by every sequence (when the backend reads it)
  bool kv_unified_given = false;
  int64_t block_size = 32;  // tokens per KV block
  bool prefix_caching = true;
  int64_t max_queue = 64;
  size_t max_body = size_t{8} << 20;
  std::string api_key;       // --api-key, or QRUN_API_KEY from the environment
  std::string api_key_file;  // --api-key-file: the key on its first line
  double timeout_s = 600;
  ChatTemplateFlags chat_template;
  bool quiet = false;
};

constexpr int64_t kMinSlotCtx = 16;

// The key from --api-key-file (its first line, surrounding whitespace dropped), else from
// --api-key, else from QRUN_API_KEY; "" for none. A file that holds no key is a usage error.
Result<std::string> api_key(const ServeOptions& o) {
  if (o.api_key_file.empty()) {
    const char* env = std::getenv("QRUN_API_KEY");
    return !o.api_key.empty() || env == nullptr ? o.api_key : std::string(env);
  }
  Result<std::string> text = read_text_file("--api-key-file", o.api_key_file);
  if (!text.ok()) return text.error();
  std::string key = text->substr(0, text->find('\n'));
  const char* space = " \t\r";
  key.erase(0, key.find_first_not_of(space));
  key.erase(key.find_last_not_of(space) + 1);
  if (key.empty()) {
    return make_error(ErrorCode::kUsage,
                      "--api-key-file: '" + o.api_key_file + "' holds no key on its first line");
  }
  return key;
}

Result<void> run_serve(ServeOptions o) {
  if (o.sampling.error) return *o.sampling.error;
  o.model.n_seq = o.n_parallel;                    // one batched step holds every sequence
  if ((o.block_size & (o.block_size - 1)) != 0) {  // before the model loads: a typo fails fast
    return make_error(ErrorCode::kUsage, format("--block-size %lld: not a power of two",
                                                static_cast<long long>(o.block_size)));
  }
  Result<std::string> key = api_key(o);
  if (!key.ok()) return key.error();
  // Before any thread exists (the backend's pool, httplib's), so that all inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is a failed write, not a death

  Result<std::optional<ChatTemplate>> flag_template = read_chat_template_flags(o.chat_template);
  if (!flag_template.ok()) return flag_template.error();
  Result<ChatTemplate> tmpl = make_error(ErrorCode::kUnsupported, "");
  if (*flag_template) tmpl = std::move(**flag_template);
  Result<std::unique_ptr<Session>> session = open_session(o.model, !o.quiet);
  if (!session.ok()) return session.error();
  Session& s = **session;
  if (!*flag_template) {
    tmpl = ChatTemplate::from_gguf(s.file, s.model_name);
    if (!tmpl.ok() && !o.quiet) {
      std::fprintf(stderr, "qrun: warning: %s; /v1/chat/completions will answer 400\n",
                   tmpl.error().message.c_str());
    }
  }
  Result<SamplingParams> sp = resolve_sampling_params(o.sampling, *s.tokenizer);
  if (!sp.ok()) return sp.error();  // a bad --logit-bias fails at start, not per request

  // -c is the total. Unified (paged): one pool of -c tokens in blocks that any sequence
  // takes as it grows, each sequence up to -c. Else each of the -np slots gets an equal
  // share, as llama-server splits it without --kv-unified.
  const int64_t n_ctx = s.kv.n_ctx();
  const bool paged = o.kv_unified && s.backend->supports_paged_kv();
  if (o.kv_unified && o.kv_unified_given && !paged) {
    return make_error(ErrorCode::kUsage,
                      format("--kv-unified needs a backend that reads paged KV views, and the "
                             "%s backend does not: leave it out, or use --no-kv-unified",
                             std::string(s.backend->name()).c_str()));
  }
  const int64_t slot_ctx = paged ? n_ctx : n_ctx / o.n_parallel;
  if (slot_ctx < kMinSlotCtx) {
    return make_error(
        ErrorCode::kUsage,
        format("-c %lld split over -np %d leaves %lld tokens per sequence; give "
               "at least %lld per sequence",
               static_cast<long long>(n_ctx), o.n_parallel, static_cast<long long>(slot_ctx),
               static_cast<long long>(kMinSlotCtx)));
  }
  const KvTypes cache_types = kv_types(o.model);
  { KvCache session_kv = std::move(s.kv); }  // freed before the slots take their memory
  std::vector<KvCache> slots;
  std::shared_ptr<KvBlockPool> pool;
  if (paged) {
    Result<std::shared_ptr<KvBlockPool>> made = make_kv_block_pool(
        *s.model, (n_ctx + o.block_size - 1) / o.block_size, o.block_size, cache_types);
    if (!made.ok()) return made.error();
    pool = std::move(*made);
  }
  for (int i = 0; i < o.n_parallel; ++i) {
    Result<KvCache> kv = paged ? make_paged_kv_cache(*s.model, pool, slot_ctx)
                               : make_kv_cache(*s.model, slot_ctx, cache_types);
    if (!kv.ok()) return kv.error();
    slots.push_back(std::move(*kv));
  }

  serve::ServerConfig config;
  config.sampling = o.sampling;
  config.api_key = *key;
  config.timeout_s = o.timeout_s;
  config.n_batch = o.model.batch_size;
  config.prefix_caching = o.prefix_caching;
  config.model_id = o.model.model.empty()
                        ? s.model_name
                        : std::filesystem::path(o.model.model).filename().string();
  config.log_requests = !o.quiet;
  serve::Server server(s, std::move(slots), o.max_queue, std::move(tmpl), std::move(config));

  httplib::Server http;
  // One HTTP thread per running or queued request, and a few for /health and refusals.
  const size_t n_threads = static_cast<size_t>(o.n_parallel + o.max_queue + 4);
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  // httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and
  // take half its connections; SO_REUSEADDR alone allows a restart past TIME_WAIT and makes
  // a port in use an error.
  // The listening socket is ours to listen on again once bound (below).
  socket_t listener = INVALID_SOCKET;
  http.set_socket_options([&listener](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listener = sock;
  });
  http.set_keep_alive_timeout(2);  // idle keep-alive connections do not hold up shutdown long
  server.install(http, o.max_body);

  int port = o.port;
  if (port == 0) {
    port = http.bind_to_any_port(o.host);
  } else if (!http.bind_to_port(o.host, port)) {
    port = -1;
  }
  if (port < 0) {
    return make_error(ErrorCode::kIo, format("cannot listen on %s:%d (in use, or not an address "
                                             "of this host)",
                                             o.host.c_str(), o.port));
  }
  // httplib listens with a backlog of 5 (Debian's build of it): a burst of clients
  // connecting at once overflowed that queue, and the kernel reset some of their
  // connections before a request was read. Listening again on the bound socket sets the
  // system's maximum instead (Linux updates the backlog of a listening socket).
  if (listener == INVALID_SOCKET || ::listen(listener, SOMAXCONN) != 0) {
    return make_error(ErrorCode::kIo, format("cannot listen on %s:%d with a backlog of %d",
                                             o.host.c_str(), port, SOMAXCONN));
  }
  if (!o.quiet && paged) {
    std::fprintf(stderr,
                 "qrun: %d sequences of up to %lld tokens sharing a paged KV cache of %lld blocks "
                 "of %lld tokens, queue of %lld\n",
                 server.n_slots(), static_cast<long long>(server.slot_ctx()),
                 static_cast<long long>(pool->n_blocks()), static_cast<long long>(o.block_size),
                 static_cast<long long>(o.max_queue));
  } else if (!o.quiet) {
    std::fprintf(stderr, "qrun: %d sequence slots of %lld tokens, queue of %lld\n",
                 server.n_slots(), static_cast<long long>(server.slot_ctx()),
                 static_cast<long long>(o.max_queue));
  }
  std::fprintf(stderr, "qrun: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> done{false};
  int stop_signal = 0;
  std::thread watcher([&] {
    const timespec tick{0, 100 * 1000 * 1000};
    const auto tick_ms = std::chrono::milliseconds(10);
    while (!done.load()) {
      const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        stop_signal = sig;
        server.shut_down();
        // A signal in the moment before listen_after_bind runs must still stop it.
        while (!done.load() && !http.is_running()) std::this_thread::sleep_for(tick_ms);
        http.stop();
        return;
      }
    }
  });
  const bool listened = http.listen_after_bind();
  done.store(true);
  watcher.join();
  if (stop_signal != 0) {
    if (!o.quiet) {
      std::fprintf(stderr, "qrun: %s, shut down\n", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    }
    return {};
  }
  if (!listened) return make_error(ErrorCode::kIo, "the HTTP server stopped unexpectedly");
  return {};
}

}  // namespace

void register_serve(CLI::App& app, Action* selected) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  add_model_flags(cmd, o->model);
  cmd->get_option("--batch-size")
      ->description(
          "Tokens per engine step: one decode token for every running sequence, the rest "
          "for prompt chunks (chunked prefill; at least one token a step)");
  cmd->add_option("--host", o->host, "Address to bind (0.0.0.0 for every interface)")
      ->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: pick a free one and print it)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o->n_parallel,
                  "Sequences generated at once (also -np), all decoded together in one batched "
                  "forward pass per step; they share the -c tokens of KV cache (see "
                  "--kv-unified)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_flag(
         "--kv-unified,!--no-kv-unified", o->kv_unified,
         "One paged KV cache of -c tokens (also -kvu) for all sequences: each takes blocks as it "
         "grows, up to -c tokens; when the cache is full a new prompt waits, and a decoding "
         "sequence preempts the newest running one, which is recomputed later "
         "(default, with -ngl too). "
         "--no-kv-unified: each of the -np sequences gets -c / N tokens of its own")
      ->each([o](const std::string&) { o->kv_unified_given = true; });
  cmd->add_option("--block-size", o->block_size,
                  "Tokens per KV cache block with --kv-unified (a power of two, at least 16)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{4096}));
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o->prefix_caching,
                "With --kv-unified: a request whose prompt starts with whole blocks an earlier "
                "one computed shares them and skips their prefill (on by default)");
  cmd->add_option("--max-queue", o->max_queue,
                  "Requests that may wait for a sequence slot; more get 503")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  cmd->add_option("--max-body-size", o->max_body, "Largest request body in bytes; larger get 413")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  CLI::Option* key =
      cmd->add_option("--api-key", o->api_key,
                      "Require 'Authorization: Bearer KEY' on every route but /health (also "
                      "from the environment: QRUN_API_KEY, which `ps` does not show)");
  add_file_option(cmd, "--api-key-file", o->api_key_file,
                  "Read the API key from the first line of FILE (instead of --api-key)")
      ->excludes(key);
  cmd->add_option("--timeout", o->timeout_s,
                  "Seconds a request may run once it has a sequence slot (also -to); then it "
                  "ends with finish_reason \"length\" and the text so far (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  add_chat_template_flags(cmd, o->chat_template);
  cmd->add_flag("-q,--quiet", o->quiet, "No logs on stderr but the listening address");
  add_sampling_flags(cmd, o->sampling);
  cmd->footer(
      "Routes: GET /health, GET /metrics (Prometheus), GET /v1/models, POST /v1/completions,\n"
      "POST /v1/chat/completions.\n"
      "Continuous batching: one engine thread runs steps; each step decodes one token for\n"
      "every running sequence and gives the rest of the -b/--batch-size token budget to\n"
      "waiting prompts in chunks (chunked prefill), all in one forward pass, so a long prompt\n"
      "never stalls the running streams. Requests beyond -np wait in the queue, and so do\n"
      "requests whose prompt finds too few free KV blocks (--kv-unified). /metrics shows the\n"
      "KV blocks used, free and cached, prefix-cache hits and preemptions.\n"
      "Sampling flags are the defaults; a request's temperature, top_p, min_p, top_k, seed,\n"
      "presence_penalty, frequency_penalty, stop and response_format override them, and its\n"
      "logit_bias adds to --logit-bias.\n"
      "Exit codes: 0 after SIGINT or SIGTERM, 2 usage, 3 cannot bind or read a file, 4-6 as\n"
      "for `run` while loading the model.");
  cmd->callback([o, selected] { *selected = [o] { return run_serve(*o); }; });
}

}  // namespace qrun::cli
