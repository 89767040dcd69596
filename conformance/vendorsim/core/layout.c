/*
 * layout.c: the sizes and offsets of a communicator's data segment (see
 * vsim_internal.h for what it holds). Both ways ranks share it need them:
 * net.c (a private copy per rank across hosts) and comm.c (one shared
 * segment on a host).
 */
#include "vsim_internal.h"

size_t vsim_slots_offset(int nranks) {
  size_t n = (size_t)nranks;
  return vsim_round_up(n * sizeof(vsim_shm_coll) + n * n * sizeof(vsim_shm_mbox), 4096);
}

/* Default sizes keep a communicator's shared memory small (a few MiB for 8
 * ranks, since CI containers often have a 64 MiB /dev/shm) while letting
 * large buffers through in a reasonable number of chunks. */
void vsim_choose_layout(int nranks, size_t* slot, size_t* mbox) {
  size_t n = (size_t)nranks;
  size_t s = vsim_env_slot_bytes();
  if (s == 0) {
    s = (32u << 20) / n;
    if (s > (256u << 10)) s = 256u << 10;
    if (s < (4u << 10)) s = 4u << 10;
  }
  /* A reduce-scatter/alltoall round needs room for one element per rank. */
  if (s < n * 8) s = n * 8;
  *slot = vsim_round_up(s, 64);

  size_t m = vsim_env_mailbox_bytes();
  if (m == 0) {
    m = (16u << 20) / (n * n);
    if (m > (64u << 10)) m = 64u << 10;
    if (m < (1u << 10)) m = 1u << 10;
  }
  /* Room for a message header plus data, so every message makes progress. */
  if (m < 2 * sizeof(vsim_msg_header)) m = 2 * sizeof(vsim_msg_header);
  *mbox = vsim_round_up(m, 64);
}

size_t vsim_data_size(int nranks, size_t slot, size_t mbox) {
  size_t n = (size_t)nranks;
  return vsim_slots_offset(nranks) + n * slot + n * n * mbox;
}
