#pragma once
// Waiting for SIGTERM/SIGINT without async-signal-unsafe handlers: the signals are blocked in
// every thread and one thread takes them with sigwait().

namespace troika {

// Blocks SIGTERM and SIGINT in the calling thread and every thread it creates afterwards.
// Call first thing in main().
void BlockTerminationSignals();
// Blocks until SIGTERM or SIGINT arrives; returns its number.
int WaitForTerminationSignal();

}  // namespace troika
