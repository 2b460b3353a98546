// Crash-safe recording (docs/recording.md, Crashes): when the app dies of a
// signal, the records already complete are finished on disk before the
// signal's own disposition runs — and a signal the app handles itself (a
// guard page, a JIT's probe, a garbage collector's barrier) stays the app's.
//
// A record is complete once its epilogue snapshot is taken (to the host or to
// device scratch): the recorder then hands it to its writer thread, bracketed
// by writer_begin() / writer_end(). install() puts a handler on SIGSEGV,
// SIGBUS, SIGABRT (abort(), an uncaught C++ exception through std::terminate),
// SIGFPE and SIGILL, keeping the disposition each had before:
//  - the app's own handler: called directly, as the kernel would have called
//    it (its SA_SIGINFO or not, its sa_mask, SA_NODEFER, SA_RESETHAND once),
//    with the original siginfo_t and ucontext, so that it recognises its fault
//    and resumes; nothing waits, and this handler stays installed. When that
//    handler gave the signal up to the default action (SIG_DFL, then return),
//    the writer is waited for before the app dies.
//  - SIG_IGN: the signal stays ignored (a fault the kernel raised cannot be:
//    as the kernel would, the default action follows).
//  - the default action: the handler waits — async-signal-safely, at most the
//    configured time — for the writer to finish what it holds, then restores
//    the default and lets the signal come again: a fault by returning (the
//    instruction faults again, with its own siginfo, for a core dump to show),
//    a signal sent by kill()/raise()/abort() by raising it.
// A launch still in flight when the signal comes was never handed to the
// writer: its record is absent (the writer renames a finished file into place).
//
// Limits: the wait is bounded because the crashing thread may hold a lock the
// writer needs (malloc's, after heap corruption); what the writer holds then
// is left out, as a temporary file readers skip. A handler the app installs
// for these signals after install() replaces this one — the app's right; a
// crash it does not handle then loses only the record in the writer (unless
// it ends in abort(), whose SIGABRT still comes here). An app handler that
// _exit()s loses it too. Stack overflows are handled on an alternate signal
// stack: protect_this_thread() gives one to the thread that loaded the
// recorder and to every thread that records (a thread that has one keeps it).
#pragma once

#include <cstdint>

namespace kir::record::crash {

/// How long the handler waits for the writer: KIR_RECORD_CRASH_WAIT_MS
/// (milliseconds, default 10000).
uint64_t wait_from_environment();

/// Install the handlers (once per process; later calls only set the wait) and
/// protect the calling thread. False when sigaction refused one (the others
/// stay installed).
bool install(uint64_t wait_ms);

/// An alternate signal stack for the calling thread (256 KiB and a guard
/// page, unmapped as the thread exits) unless it has one; once per thread.
void protect_this_thread();

/// The writer holds a complete record, from before its thread starts to after
/// the record file is renamed into place. Calls nest (a count).
void writer_begin();
/// Called on the writer thread as it starts: a crash on that thread does not wait for itself.
void writer_thread();
void writer_end();

}  // namespace kir::record::crash
