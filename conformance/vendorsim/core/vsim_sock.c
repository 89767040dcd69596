/*
 * vsim_sock.c: plain TCP sockets for the emulators (see vsim_sock.h).
 */
#define _GNU_SOURCE
#include "vsim_sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Whether interface name matches FLAGCX_SOCKET_IFNAME's spec. */
static int ifname_selected(const char* spec, const char* name) {
  int exclude = spec[0] == '^', exact = 0;
  const char* p = spec + exclude;
  if (*p == '=') exact = 1, p++;
  int hit = 0;
  while (*p && !hit) {
    const char* end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    hit = n > 0 && (exact ? strlen(name) == n && strncmp(name, p, n) == 0 : strncmp(name, p, n) == 0);
    p = end ? end + 1 : p + n;
  }
  return exclude ? !hit : hit;
}

static uint32_t local_ip;
static pthread_once_t local_once = PTHREAD_ONCE_INIT;

static void find_local_ip(void) {
  const char* spec = getenv("FLAGCX_SOCKET_IFNAME");
  if (spec != NULL && *spec == '\0') spec = NULL;
  local_ip = htonl(INADDR_LOOPBACK);
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) return;
  for (struct ifaddrs* a = list; a != NULL; a = a->ifa_next) {
    if (a->ifa_addr == NULL || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
    if (spec != NULL ? !ifname_selected(spec, a->ifa_name) : (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    local_ip = ((struct sockaddr_in*)a->ifa_addr)->sin_addr.s_addr;
    break;
  }
  freeifaddrs(list);
}

uint32_t vsim_sock_local_ip(void) {
  pthread_once(&local_once, find_local_ip);
  return local_ip;
}

void vsim_sock_ntoa(uint32_t ip, char* out, size_t len) {
  struct in_addr a = {.s_addr = ip};
  if (inet_ntop(AF_INET, &a, out, (socklen_t)len) == NULL) snprintf(out, len, "?");
}

int vsim_sock_listen(uint32_t ip, uint16_t* port, char* why, size_t whylen) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(why, whylen, "socket: %s", strerror(errno));
    return -1;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = htons(*port)};
  socklen_t sl = sizeof sa;
  char a[32];
  if (bind(fd, (struct sockaddr*)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, (struct sockaddr*)&sa, &sl) != 0) {
    vsim_sock_ntoa(ip, a, sizeof a);
    snprintf(why, whylen, "listening on %s: %s (FLAGCX_SOCKET_IFNAME picks the interface)", a,
             strerror(errno));
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

static struct timeval to_tv(double s) {
  struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
  return tv;
}

void vsim_sock_tune(int fd, double send_timeout_s, double recv_timeout_s) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval s = to_tv(send_timeout_s), r = to_tv(recv_timeout_s);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof s);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
}

int vsim_sock_connect(uint32_t ip, uint16_t port, double timeout_s, double io_timeout_s, char* why,
                      size_t whylen) {
  char a[32];
  vsim_sock_ntoa(ip, a, sizeof a);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(why, whylen, "socket: %s", strerror(errno));
    return -1;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = htons(port)};
  int err = 0;
  if (connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int ms = timeout_s <= 0 ? 1 : (int)(timeout_s * 1000);
      socklen_t el = sizeof err;
      if (poll(&p, 1, ms) != 1) err = ETIMEDOUT;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
    }
  }
  if (err != 0) {
    snprintf(why, whylen, "connecting to %s:%u: %s", a, (unsigned)port, strerror(err));
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  vsim_sock_tune(fd, io_timeout_s, 0);
  return fd;
}

int vsim_sock_write(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

int vsim_sock_read(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t k = recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}
