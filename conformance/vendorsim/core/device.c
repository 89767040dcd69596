/*
 * device.c: emulated devices: count, current device, PCI locations and a
 * plausible PCIe tree (pairs of devices share a switch, the first half of
 * the devices hangs off CPU socket 0 and the second half off socket 1, as on
 * an 8-GPU HGX board).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "vsim_core.h"

/* The current device is per thread, as cudaSetDevice's is. */
static __thread int current_device = 0;

int vsim_device_count(void) { return vsim_env_devices(); }

int vsim_current_device(void) { return current_device; }

int vsim_set_current_device(int dev) {
  if (dev < 0 || dev >= vsim_device_count()) return -1;
  current_device = dev;
  return 0;
}

/* Bus numbers 0x10, 0x11, ... in domain 0; past 240 devices the domain
 * grows, so every device has a distinct, parseable address. */
void vsim_device_pci(int dev, unsigned* domain, unsigned* bus, unsigned* slot, unsigned* func) {
  if (domain) *domain = (unsigned)dev / 240u;
  if (bus) *bus = 0x10u + (unsigned)dev % 240u;
  if (slot) *slot = 0;
  if (func) *func = 0;
}

int vsim_device_by_pci_string(const char* s) {
  if (s == NULL) return -1;
  unsigned domain, bus, slot, func;
  int used = 0;
  if (sscanf(s, "%x:%x:%x.%x%n", &domain, &bus, &slot, &func, &used) != 4) return -1;
  /* Allow trailing blanks only. */
  for (const char* p = s + used; *p; p++) {
    if (!isspace((unsigned char)*p)) return -1;
  }
  for (int d = 0; d < vsim_device_count(); d++) {
    unsigned dd, db, ds, df;
    vsim_device_pci(d, &dd, &db, &ds, &df);
    if (dd == domain && db == bus && ds == slot && df == func) return d;
  }
  return -1;
}

uint64_t vsim_device_memory_total(void) { return 80ull << 30; }

int vsim_device_distance(int a, int b) {
  int n = vsim_device_count();
  if (a == b) return 0;
  if (a / 2 == b / 2) return 1;
  int half = n < 2 ? 1 : (n + 1) / 2;
  if (a / half == b / half) return 2;
  return 3;
}
