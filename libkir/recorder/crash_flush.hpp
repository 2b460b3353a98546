// Crash-safe recording (docs/recording.md, Crashes): when the app dies of a
// signal, the records already complete are finished on disk before the
// signal's own disposition runs.
//
// A record is complete once its epilogue snapshot is taken (to the host or to
// device scratch): the recorder then hands it to its writer thread, bracketed
// by writer_begin() / writer_end(). On SIGSEGV, SIGBUS, SIGABRT (abort(), an
// uncaught C++ exception through std::terminate), SIGFPE and SIGILL, the
// handler waits — async-signal-safely, at most the configured time — for the
// writer to finish what it holds, then restores the disposition the signal had
// before install() and raises the signal again: the previous handler runs, or
// the default action (core dump, the status a shell reports as 128 + signal).
// A launch still in flight when the signal comes was never handed to the
// writer: its record is absent (the writer renames a finished file into place).
//
// Limits: the wait is bounded because the crashing thread may hold a lock the
// writer needs (malloc's, after heap corruption); what the writer holds then
// is left out, as a temporary file readers skip. A handler the app installs
// for these signals after install() replaces this one (that app's crashes lose
// the record in the writer). The alternate signal stack (for stack overflows)
// serves the thread that called install().
#pragma once

#include <cstdint>

namespace kir::record::crash {

/// How long the handler waits for the writer: KIR_RECORD_CRASH_WAIT_MS
/// (milliseconds, default 10000).
uint64_t wait_from_environment();

/// Install the handlers (once per process; later calls only set the wait).
/// False when sigaction refused one (the others stay installed).
bool install(uint64_t wait_ms);

/// The writer holds a complete record, from before its thread starts to after
/// the record file is renamed into place. Calls nest (a count).
void writer_begin();
/// Called on the writer thread as it starts: a crash on that thread does not wait for itself.
void writer_thread();
void writer_end();

}  // namespace kir::record::crash
