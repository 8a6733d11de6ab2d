/* Step/phase markers for any program recorded by `calo record` (C ABI, C linkage, no dependency but libc).
 * Sends one datagram per call to the unix socket named in $CALO_MARKER_SOCKET; does nothing when it is unset.
 * Never blocks: a marker that cannot be sent right now is dropped. Compile markers_c.cpp into your program or
 * copy both files. Protocol: docs/TELEMETRY.md. */
#ifndef CALO_TELEMETRY_MARKERS_C_H
#define CALO_TELEMETRY_MARKERS_C_H

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the beginning of training step `step` on rank `rank` (-1 = unknown); returns 0 if sent. */
int calo_marker_begin_step(long long step, int rank);
/** Marks the end of training step `step` on rank `rank` (-1 = unknown); returns 0 if sent. */
int calo_marker_end_step(long long step, int rank);
/** Switches rank `rank` to phase `name` (one word, e.g. "backward"); the previous phase ends now. */
int calo_marker_phase(const char* name, int rank);
/** Sends one raw protocol line (e.g. "begin phase warmup rank 3"); returns 0 if sent. */
int calo_marker_send(const char* line);

#ifdef __cplusplus
}
#endif

#endif /* CALO_TELEMETRY_MARKERS_C_H */
