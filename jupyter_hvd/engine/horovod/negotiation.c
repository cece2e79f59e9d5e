/* Horovod's negotiation waited for with naps instead of Open MPI's busy wait (engine/horovod/negotiation.py).
 *
 * Horovod's background thread agrees with the other ranks once per cycle (1 ms) with an in-place MPI_Allreduce of
 * long longs under MPI_BAND or MPI_BOR (MPIController::CrossRankBitwiseAnd/Or). Open MPI busy-waits in it, so the
 * rank that arrives first spins until the last one does. Switched on, this wrapper (MPI's profiling layer: it
 * replaces MPI_Allreduce, Open MPI's PMPI_Allreduce stays) starts that allreduce nonblocking and polls it: 0.1 ms as
 * MPI would, then naps of a tenth of the time waited so far, at most 1 ms (as the pool's own wait for an op naps,
 * engine/collectives.py). Every other call, and every call while switched off, goes to Open MPI unchanged. All ranks
 * of a pool or none: a nonblocking collective does not match a blocking one.
 */
#include <mpi.h>
#include <time.h>

static volatile int naps = 0;
static volatile long waits = 0;

void jupyter_hvd_negotiation_naps(int on) { naps = on; }
long jupyter_hvd_negotiation_waits(void) { return waits; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (!naps || sendbuf != MPI_IN_PLACE || datatype != MPI_LONG_LONG_INT || (op != MPI_BAND && op != MPI_BOR))
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  MPI_Request request;
  int rc = PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, &request);
  if (rc != MPI_SUCCESS) return rc;
  waits++;
  double start = now_s();
  for (;;) {
    int done = 0;
    rc = PMPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    double waited = now_s() - start;
    if (waited < 1e-4) continue;
    double nap = waited / 10 < 1e-3 ? waited / 10 : 1e-3;
    struct timespec pause = {0, (long)(nap * 1e9)};
    nanosleep(&pause, 0);
  }
}
