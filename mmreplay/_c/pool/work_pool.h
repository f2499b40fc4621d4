/* The helper threads that share one call's work with the calling thread: a batch's frames decoded, a
 * vector add's frames compressed. pool_run hands out the call's tasks and returns once all have run;
 * nothing is posted ahead, nothing outlives the call. Helpers are started on first use and then sleep
 * between calls. A process forked from one whose helpers exist starts helpers of its own on its first
 * call, and never waits for a thread it does not have. How many threads a call takes is the caller's
 * choice (mmreplay/frames/threads.py: the batch's size and the cores the process may use). */
#ifndef MMREPLAY_WORK_POOL_H
#define MMREPLAY_WORK_POOL_H

#include <Python.h>

/* The most threads one pool_run uses (the caller included). */
#define POOL_MAX_THREADS 64

/* One task of a call: task runs once for each of its numbers, on any thread, in any order. */
typedef void (*pool_task)(void *context, Py_ssize_t number);

/* Runs task(context, t) for every t in [0, tasks) on the calling thread and up to threads - 1 helpers,
 * and returns once every one has run; context may live on the caller's stack. The calling thread runs
 * every task itself when threads < 2, when there is one task, when another call is using the helpers,
 * or when no helper could be started. Call with the GIL released. */
void pool_run(Py_ssize_t tasks, int threads, pool_task task, void *context);

#endif
