// The built-in tracing client (used by `kir trace`): KIR_TRACE=text|json turns
// it on; lines go to the file descriptor KIR_TRACE_FD (default: stderr), one
// per registration, unregistration, allocation, free and completed launch.
//
// KIR_TRACE_FD is "N" or "N:DEV:INO" (`kir trace` gives the pipe's st_dev and
// st_ino): at start the client takes descriptor N only if it still is that
// file, moves it to a high close-on-exec descriptor and closes N, so the app
// can reuse N for its own files without receiving trace lines, and programs
// it execs (a background `sleep &`) do not hold the trace pipe open. A
// descriptor that is not the pipe named (the app's own file in a program the
// app ran) is never written: lines go to stderr.
//
// KIR_TRACE_KERNELS=REGEX (`kir trace --kernel`) keeps only the kernel
// registrations and launches the pattern selects (kir/support/kernel_pattern.hpp:
// kir's own matcher, mangled or demangled name, as every kir command); a pattern
// it refuses is said once and no kernel is traced.
//
// Argument values: where the kernel's signature is known — the parameter list
// of its demangled name, when it has as many parameters as the cubin's
// parameter info and each one's size fits its type — a float or double prints
// as the shortest decimal that reads back the same value (`2.5`), an integer
// in decimal (`1024`, `-3`), a bool as `true`/`false`, a pointer or reference
// in hex (`0x7f00...`). Anything else (a struct, an enum, a kernel declared
// extern "C" whose name carries no signature) prints as before: a value of up
// to 8 bytes as little-endian hex, a larger one as its bytes in hex. The JSON
// line's `args` keep the raw form; its `values` hold the text form.
//
// Runtime constants (the Proteus ABI, kir_hook_kernel.jit_args): a kernel's
// register-kernel line lists them (`jit=[1:scalar:f32,3:array:i32[@4]]`: an
// array's element count, or `@` the position of the argument holding it; JSON
// `jit`: objects), and each launch marks their values (`jit:2.5`; JSON `jit`:
// their 1-based positions). The pass describes them right after the runtime
// registered the kernel (Proteus src/pass/ProteusPass.cpp: the call to
// getJitRegisterFunctionFn's function is inserted after each registration
// call), so the client holds a register-kernel line until the next event: the
// layer tells it (Layer::jit_args_observer) when they arrive. Constants that
// come after the line was printed (another event came between) print as a
// register-jit-args line.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kir/device_code.hpp"
#include "kir/hooks.h"
#include "kir/model.hpp"
#include "kir/support/demangle.hpp"
#include "kir/support/json.hpp"
#include "kir/support/kernel_pattern.hpp"
#include "kir_hook_internal/settings.hpp"
#include "layer.hpp"

namespace {

// Constant-initialized: start_tracing() (a constructor function) may run before
// this file's dynamic initializers would.
FILE* out = nullptr;  // stderr when KIR_TRACE_FD is not set
bool json = false;

// KIR_TRACE_KERNELS: the compiled pattern (set once, at start), whether it was
// refused, and each kernel's verdict, decided once per kernel (launches are
// frequent; the pattern runs at registration or first launch). The views stay
// valid for the process's life (kir/hooks.h), so their address is the key; a
// kernel registered again at the same host stub is a new view.
const kir::KernelPattern* kernel_pattern = nullptr;
bool pattern_refused = false;
std::mutex* verdict_mutex = nullptr;
std::unordered_map<const kir_hook_kernel*, bool>* verdicts = nullptr;

/// Whether KIR_TRACE_KERNELS lets `kernel` (NULL: an unregistered launch, kept
/// only without a pattern) through.
bool selected(const kir_hook_kernel* kernel) {
  if (pattern_refused) return false;
  if (!kernel_pattern) return true;
  if (!kernel) return false;
  std::lock_guard<std::mutex> lock(*verdict_mutex);
  auto [it, first] = verdicts->try_emplace(kernel, false);
  if (first) it->second = kernel_pattern->selects(kernel->name ? kernel->name : "");
  return it->second;
}

std::string hex_hash(kir_hash128 h) {
  char text[33];
  kir_hash_to_hex(h, text);
  return text;
}

std::string quoted(const std::string& s) { return kir::json_quoted(s); }  // a JSON string

/// One argument's bytes: scalars (up to 8 bytes) as a little-endian hex value, larger ones as hex bytes.
std::string arg_text(const void* value, uint32_t size) {
  const auto* b = static_cast<const uint8_t*>(value);
  char buf[3];
  std::string s;
  if (size <= 8) {
    uint64_t v = 0;
    std::memcpy(&v, b, size);
    char num[24];
    std::snprintf(num, sizeof num, "0x%llx", static_cast<unsigned long long>(v));
    return num;
  }
  for (uint32_t i = 0; i < size; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    s += buf;
  }
  return s;
}

/// How a parameter's value prints: from its type in the demangled signature.
enum class ArgKind : uint8_t { raw, pointer, floating, signed_int, unsigned_int, boolean };

/// The top-level parameter types of a demangled function name: the text inside
/// its last balanced parentheses, split at commas outside <>, () and [].
/// Empty with `ok` false when the name has no parameter list.
std::vector<std::string> parameter_types(const std::string& demangled, bool& ok) {
  ok = false;
  std::vector<std::string> types;
  if (demangled.empty() || demangled.back() != ')') return types;
  int depth = 0;
  size_t open = std::string::npos;
  for (size_t i = demangled.size(); i-- > 0;) {
    char c = demangled[i];
    if (c == ')') ++depth;
    else if (c == '(' && --depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string::npos) return types;
  std::string inner = demangled.substr(open + 1, demangled.size() - open - 2);
  ok = true;
  if (inner.empty() || inner == "void") return types;
  std::string current;
  int nest = 0;
  for (char c : inner) {
    if (c == '<' || c == '(' || c == '[') ++nest;
    if (c == '>' || c == ')' || c == ']') --nest;
    if (c == ',' && nest == 0) {
      types.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  types.push_back(current);
  for (std::string& t : types) {  // trim
    size_t b = t.find_first_not_of(' '), e = t.find_last_not_of(' ');
    t = b == std::string::npos ? "" : t.substr(b, e - b + 1);
  }
  return types;
}

/// The kind of a parameter of type `type` whose value is `size` bytes: raw
/// unless the type names a scalar of that size (LP64, as CUDA and HIP on Linux).
ArgKind kind_of(const std::string& type, uint32_t size) {
  if (!type.empty() && (type.back() == '*' || type.back() == '&' || type.find("(*)") != std::string::npos))
    return size == sizeof(void*) ? ArgKind::pointer : ArgKind::raw;
  struct Scalar {
    const char* name;
    uint32_t size;
    ArgKind kind;
  };
  static const Scalar scalars[] = {
      {"float", 4, ArgKind::floating},         {"double", 8, ArgKind::floating},
      {"bool", 1, ArgKind::boolean},           {"char", 1, ArgKind::signed_int},
      {"signed char", 1, ArgKind::signed_int}, {"unsigned char", 1, ArgKind::unsigned_int},
      {"short", 2, ArgKind::signed_int},       {"unsigned short", 2, ArgKind::unsigned_int},
      {"int", 4, ArgKind::signed_int},         {"unsigned int", 4, ArgKind::unsigned_int},
      {"long", 8, ArgKind::signed_int},        {"unsigned long", 8, ArgKind::unsigned_int},
      {"long long", 8, ArgKind::signed_int},   {"unsigned long long", 8, ArgKind::unsigned_int},
      {"std::nullptr_t", 8, ArgKind::pointer},
  };
  for (const Scalar& s : scalars)
    if (type == s.name) return s.size == size ? s.kind : ArgKind::raw;
  return ArgKind::raw;
}

/// Each parameter's kind, decided once per kernel (the views live as long as the
/// process: their address is the key, as for the --kernels verdicts).
std::mutex kinds_mutex;
std::unordered_map<const kir_hook_kernel*, std::vector<ArgKind>>* kinds_of_kernel = nullptr;

/// (A reference into the map: its elements stay where they are as it grows, and none is erased.)
const std::vector<ArgKind>& arg_kinds(const kir_hook_kernel* k, const std::string& demangled) {
  std::lock_guard<std::mutex> lock(kinds_mutex);
  if (!kinds_of_kernel) kinds_of_kernel = new std::unordered_map<const kir_hook_kernel*, std::vector<ArgKind>>;
  auto [it, first] = kinds_of_kernel->try_emplace(k);
  if (first) {
    bool ok = false;
    std::vector<std::string> types = parameter_types(demangled, ok);
    it->second.assign(k->param_count, ArgKind::raw);
    if (ok && types.size() == k->param_count)
      for (uint32_t i = 0; i < k->param_count; ++i) it->second[i] = kind_of(types[i], k->param_sizes[i]);
  }
  return it->second;
}

/// One argument as its type says (see the top of this file); raw: arg_text.
std::string typed_arg_text(const void* value, uint32_t size, ArgKind kind) {
  char num[64];
  switch (kind) {
    case ArgKind::raw: return arg_text(value, size);
    case ArgKind::pointer: return arg_text(value, size);  // 0x..., as raw: a little-endian address
    case ArgKind::boolean: {
      uint8_t b;
      std::memcpy(&b, value, 1);
      return b ? "true" : "false";
    }
    case ArgKind::floating: {
      std::to_chars_result r{};
      if (size == 4) {
        float f;
        std::memcpy(&f, value, 4);
        r = std::to_chars(num, num + sizeof num, f);
      } else {
        double d;
        std::memcpy(&d, value, 8);
        r = std::to_chars(num, num + sizeof num, d);
      }
      return std::string(num, r.ptr);
    }
    case ArgKind::signed_int: {
      int64_t v = 0;
      if (size == 1) {
        int8_t x;
        std::memcpy(&x, value, 1);
        v = x;
      } else if (size == 2) {
        int16_t x;
        std::memcpy(&x, value, 2);
        v = x;
      } else if (size == 4) {
        int32_t x;
        std::memcpy(&x, value, 4);
        v = x;
      } else std::memcpy(&v, value, 8);
      return std::to_string(v);
    }
    case ArgKind::unsigned_int: {
      uint64_t v = 0;
      std::memcpy(&v, value, size);  // little-endian: the low bytes
      return std::to_string(v);
    }
  }
  return arg_text(value, size);
}

bool to_pipe = false;  // `out` is a pipe: `kir trace` may have stopped reading

void line(const std::string& text) {
  FILE* f = out ? out : stderr;
  if (!to_pipe) {
    std::fprintf(f, "%s\n", text.c_str());
    std::fflush(f);
    return;
  }
  // A child the app forked may trace after `kir trace` has ended with the app:
  // the write then fails with EPIPE, and the SIGPIPE it raises must not kill
  // the child. Block it around the write and drop the one this write raised.
  sigset_t pipe, old, pending;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  bool was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  std::fprintf(f, "%s\n", text.c_str());
  std::fflush(f);
  if (!was_pending) {
    struct timespec zero{};
    sigtimedwait(&pipe, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

/// A fatbin event: `event` and one count, as JSON or text.
void fatbin_line(const char* event, const void* handle, const char* count_name, size_t count) {
  char buf[160];
  unsigned long long h = reinterpret_cast<uintptr_t>(handle);
  if (json)
    std::snprintf(buf, sizeof buf, "{\"event\":\"%s\",\"handle\":%llu,\"%s\":%zu}", event, h, count_name, count);
  else std::snprintf(buf, sizeof buf, "kir-trace %s handle=%#llx %s=%zu", event, h, count_name, count);
  line(buf);
}

/// A kernel's runtime-constant arguments, as a register line lists them ("" when none).
std::string jit_text(const kir_hook_kernel* k) {
  uint32_t n = __atomic_load_n(&k->jit_arg_count, __ATOMIC_ACQUIRE);
  if (!n) return "";
  std::string s;
  for (uint32_t i = 0; i < n; ++i) {
    const kir_jit_arg& a = k->jit_args[i];
    std::string kind = kir::name(kir::JitArgKind(a.kind)), type = kir::name(kir::ArgType(a.type));
    std::string count = a.kind == KIR_JIT_OBJECT ? std::to_string(a.count)
                        : a.count_position       ? "@" + std::to_string(a.count_position)
                                                 : std::to_string(a.count);
    if (json) {
      s += std::string(i ? "," : "") + "{\"position\":" + std::to_string(a.position) + ",\"kind\":" + quoted(kind) +
           ",\"type\":" + quoted(type);
      if (a.kind != KIR_JIT_SCALAR)
        s += std::string(",\"by_value\":") + (a.by_value ? "true" : "false") + ",\"count\":" + std::to_string(a.count) +
             ",\"count_position\":" + std::to_string(a.count_position);
      s += "}";
    } else {
      s += std::string(i ? "," : "") + std::to_string(a.position) + ":" + kind;
      if (a.kind != KIR_JIT_OBJECT) s += ":" + type;  // an object's is bytes
      if (a.kind == KIR_JIT_ARRAY) s += "[" + count + "]";
      if (a.kind == KIR_JIT_OBJECT) s += "(" + count + " bytes)";
      if (a.kind != KIR_JIT_SCALAR && a.by_value) s += ":by-value";
    }
  }
  return json ? ",\"jit\":[" + s + "]" : " jit=[" + s + "]";
}

/// The kernel whose register-kernel line waits for its runtime constants (see the
/// top of this file), under `pending_mutex`.
std::mutex pending_mutex;
const kir_hook_kernel* pending = nullptr;

/// A kernel's register line: `event` register-kernel, or register-jit-args (its constants, later).
void kernel_line(const char* event, const kir_hook_kernel* k) {
  std::string name = k->name, demangled = kir::demangle(name), h = hex_hash(k->static_hash), jit = jit_text(k);
  if (std::strcmp(event, "register-kernel") != 0) {
    line(json ? "{\"event\":\"" + std::string(event) + "\",\"kernel\":" + quoted(name) +
                    ",\"demangled\":" + quoted(demangled) + jit + "}"
              : "kir-trace " + std::string(event) + " " + demangled + " name=" + name + jit);
    return;
  }
  if (json)
    line("{\"event\":\"register-kernel\",\"kernel\":" + quoted(name) + ",\"demangled\":" + quoted(demangled) +
         ",\"params\":" + std::to_string(k->param_count) + ",\"static\":\"" + h +
         "\",\"ir\":" + std::to_string(k->ir_size) + jit + "}");
  else
    line("kir-trace register-kernel " + demangled + " name=" + name + " params=" + std::to_string(k->param_count) +
         " static=" + h + " ir=" + std::to_string(k->ir_size) + jit);
}

/// Print the register-kernel line that waits, if any: before every other line.
void flush_pending() {
  std::lock_guard<std::mutex> lock(pending_mutex);
  if (pending) kernel_line("register-kernel", pending);
  pending = nullptr;
}

/// The layer set `k`'s runtime constants (Layer::jit_args_observer).
void on_jit_args(const kir_hook_kernel* k) {
  if (!selected(k)) return;
  std::lock_guard<std::mutex> lock(pending_mutex);
  if (pending == k) {
    kernel_line("register-kernel", k);
    pending = nullptr;
    return;
  }
  kernel_line("register-jit-args", k);
}

void on_fatbin(void*, const void* handle, size_t images) {
  flush_pending();
  fatbin_line("register-fatbin", handle, "images", images);
}

/// Before the layer lets go of a fatbin or module, with the kernels registered with it.
void on_unregister(void*, const void* handle, size_t kernels) {
  flush_pending();
  fatbin_line("unregister-fatbin", handle, "kernels", kernels);
}

void on_kernel(void*, const kir_hook_kernel* k) {
  if (!selected(k)) return;
  std::lock_guard<std::mutex> lock(pending_mutex);
  if (pending) kernel_line("register-kernel", pending);
  pending = k;  // printed at the next event, with its runtime constants if they came
}

void on_global(void*, const kir_hook_global* g) {
  flush_pending();
  if (json)
    line("{\"event\":\"register-global\",\"name\":" + quoted(g->name) + ",\"size\":" + std::to_string(g->size) + "}");
  else line("kir-trace register-global name=" + std::string(g->name) + " size=" + std::to_string(g->size));
}

void on_allocation(const char* event, const kir_hook_allocation* a) {
  flush_pending();
  char buf[160];
  std::snprintf(buf, sizeof buf,
                json ? "{\"event\":\"%s\",\"address\":%llu,\"size\":%llu,\"kind\":\"%s\"}"
                     : "kir-trace %s address=%#llx size=%llu kind=%s",
                event, static_cast<unsigned long long>(a->address), static_cast<unsigned long long>(a->size),
                kir::name(kir::AllocationKind(a->kind)));
  line(buf);
}

void on_alloc(void*, const kir_hook_allocation* a) { on_allocation("alloc", a); }
void on_free(void*, const kir_hook_allocation* a) { on_allocation("free", a); }

void on_launch(void*, const kir_hook_launch* l) {
  flush_pending();
  if (!selected(l->kernel)) return;
  std::string name = l->kernel ? l->kernel->name : "", demangled = kir::demangle(name);
  std::string args, values, jit;
  if (l->kernel && l->args) {
    const std::vector<ArgKind>& kinds = arg_kinds(l->kernel, demangled);
    uint32_t jit_count = __atomic_load_n(&l->kernel->jit_arg_count, __ATOMIC_ACQUIRE), next_jit = 0;
    for (uint32_t i = 0; i < l->kernel->param_count; ++i) {
      std::string v = typed_arg_text(l->args[i], l->kernel->param_sizes[i], kinds[i]);
      // A runtime constant (jit_args are sorted by position): marked.
      while (next_jit < jit_count && l->kernel->jit_args[next_jit].position < i + 1) ++next_jit;
      if (next_jit < jit_count && l->kernel->jit_args[next_jit].position == i + 1) {
        if (json) jit += (jit.empty() ? "" : ",") + std::to_string(i + 1);
        else v = "jit:" + v;
      }
      values += (i ? "," : "") + (json ? quoted(v) : v);
      if (json) args += std::string(i ? "," : "") + quoted(arg_text(l->args[i], l->kernel->param_sizes[i]));
    }
  }
  char dims[160];
  std::snprintf(dims, sizeof dims,
                json ? "\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"shared\":%zu,\"stream\":%llu,\"result\":%d"
                     : "grid=(%u,%u,%u) block=(%u,%u,%u) shared=%zu stream=%#llx result=%d",
                l->grid.x, l->grid.y, l->grid.z, l->block.x, l->block.y, l->block.z, l->shared_bytes,
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(l->stream)), l->result);
  std::string s = l->kernel ? hex_hash(l->kernel->static_hash) : "", d = hex_hash(l->launch_identity);
  std::string api = l->api ? l->api : "";
  // A launch a client claimed (hook API 4): who, what ran, and the substitute's id.
  std::string claim;
  if (l->claimed_by >= 0) {
    const char* outcome = l->outcome == KIR_LAUNCH_HANDLED       ? "handled"
                          : l->outcome == KIR_LAUNCH_SUBSTITUTED ? "substituted"
                                                                 : "original";
    std::string id = hex_hash(l->substitute_id), by = std::to_string(l->claimed_by);
    claim = json ? ",\"claimed_by\":" + by + ",\"outcome\":\"" + outcome + "\",\"substitute\":\"" + id + "\""
                 : " claimed_by=" + by + " outcome=" + outcome + " substitute=" + id;
  }
  if (json)
    line("{\"event\":\"launch\",\"api\":" + quoted(api) + ",\"kernel\":" + quoted(name) +
         ",\"demangled\":" + quoted(demangled) + "," + dims + ",\"args\":[" + args + "],\"values\":[" + values + "]," +
         (jit.empty() ? "" : "\"jit\":[" + jit + "],") + "\"static\":\"" + s + "\",\"identity\":\"" + d + "\"" + claim +
         "}");
  else
    line("kir-trace launch " + (l->kernel ? demangled : std::string("(unregistered)")) + " kernel=" + name +
         " api=" + api + " " + dims + " args=[" + values + "] static=" + s + " identity=" + d + claim);
}

/// The trace stream for KIR_TRACE_FD = "N" or "N:DEV:INO", on a high
/// close-on-exec duplicate of N (N itself is closed); nullptr (stderr) when N
/// is not open or is not the file DEV:INO.
FILE* trace_file(const char* setting) {
  char* end = nullptr;
  long n = std::strtol(setting, &end, 10);
  if (end == setting || n < 0 || n > 1 << 24) return nullptr;
  struct stat st;
  if (fstat(int(n), &st) != 0) return nullptr;
  if (*end == ':') {
    unsigned long long dev = std::strtoull(end + 1, &end, 10), ino = 0;
    if (*end == ':') ino = std::strtoull(end + 1, &end, 10);
    if (st.st_dev != dev || st.st_ino != ino) return nullptr;  // another file now holds N
  }
  if (n <= 2) return fdopen(int(n), "w");  // stdout or stderr: the app's own, leave it where it is
  int mine = -1;
  for (int floor : {1000, 500, 200, 100, 10})  // high, under the soft limit on descriptors
    if ((mine = fcntl(int(n), F_DUPFD_CLOEXEC, floor)) >= 0) break;
  if (mine < 0) return nullptr;
  close(int(n));
  FILE* f = fdopen(mine, "w");
  if (!f) close(mine);
  return f;
}

__attribute__((constructor)) void start_tracing() {
  const char* mode = kir::hook::setting("KIR_TRACE");
  if (!mode || !*mode) return;
  json = std::strcmp(mode, "json") == 0;
  if (const char* fd = kir::hook::setting("KIR_TRACE_FD")) out = trace_file(fd);
  struct stat st;
  to_pipe = out && fstat(fileno(out), &st) == 0 && S_ISFIFO(st.st_mode);
  if (const char* pattern = kir::hook::setting("KIR_TRACE_KERNELS"); pattern && *pattern) {
    kir::Expected<kir::KernelPattern> compiled = kir::KernelPattern::create(pattern);
    if (compiled) {  // never freed: launches may come from threads that outlive exit-time destructors
      kernel_pattern = new kir::KernelPattern(std::move(*compiled));
      verdict_mutex = new std::mutex;
      verdicts = new std::unordered_map<const kir_hook_kernel*, bool>;
    } else {
      pattern_refused = true;
      std::fprintf(stderr, "kir-trace: error: KIR_TRACE_KERNELS %s: %s; no kernel is traced\n", pattern,
                   compiled.error().message().c_str());
    }
  }
  static kir_hook_client client{};
  client.struct_size = sizeof client;
  client.api_version = KIR_HOOK_API_VERSION;
  client.fatbin_registered = on_fatbin;
  client.fatbin_unregistered = on_unregister;
  client.kernel_registered = on_kernel;
  client.global_registered = on_global;
  client.allocated = on_alloc;
  client.freed = on_free;
  client.launch_completed = on_launch;
  client.launch_skips = KIR_HOOK_SKIP_DEVICE;  // it prints no device
  kir::hook::Layer::jit_args_observer = on_jit_args;
  std::atexit(flush_pending);  // a kernel registered last, with no event after it
  kir_hook_add_client(&client);
}

}  // namespace
