/*
 * vsim_sock.h: the plain TCP sockets the emulators use between hosts
 * (core/net.c for the emulated collective libraries, ibverbs/ibverbs.c for
 * the emulated fabric). Compiled into each library that uses it, hidden.
 */
#ifndef VSIM_SOCK_H
#define VSIM_SOCK_H

#include <stddef.h>
#include <stdint.h>

/* The IPv4 address (network order) this process offers to peers: the
 * first UP interface FLAGCX_SOCKET_IFNAME selects (comma-separated name
 * prefixes, "=name" exact, "^prefix" excluded), else the first UP
 * non-loopback interface, else 127.0.0.1. Read once per process. */
uint32_t vsim_sock_local_ip(void);

/* A listening socket on ip (port 0: any), close-on-exec; *port gets the
 * port. -1 with why filled on failure. */
int vsim_sock_listen(uint32_t ip, uint16_t* port, char* why, size_t whylen);

/* Connects to ip:port within timeout_s. The socket is blocking, with
 * TCP_NODELAY, and sends that make no progress for io_timeout_s fail. */
int vsim_sock_connect(uint32_t ip, uint16_t port, double timeout_s, double io_timeout_s, char* why,
                      size_t whylen);

/* Sets the blocking send/receive timeouts of fd (0: none) and TCP_NODELAY. */
void vsim_sock_tune(int fd, double send_timeout_s, double recv_timeout_s);

/* Whole writes and reads on a blocking socket: 0, or -1 on error, EOF or
 * the socket's timeout. Writes never raise SIGPIPE. */
int vsim_sock_write(int fd, const void* p, size_t n);
int vsim_sock_read(int fd, void* p, size_t n);

/* "a.b.c.d" of ip. */
void vsim_sock_ntoa(uint32_t ip, char* out, size_t len);

#endif /* VSIM_SOCK_H */
