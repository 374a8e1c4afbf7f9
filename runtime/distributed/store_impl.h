/* store_impl.h - the c10d TCPStore protocol's constants (PyTorch's TCPStoreBackend.hpp:
 * QueryType, CheckResponseType, WaitResponseType), shared by the client (store.c) and the
 * server (store_server.c). */
#ifndef EMBER_DIST_STORE_IMPL_H
#define EMBER_DIST_STORE_IMPL_H

#include "ember/dist.h"

#define STORE_VALIDATION_MAGIC 0x3C85F7CEu

enum {
  STORE_VALIDATE = 0,
  STORE_SET,
  STORE_COMPARE_SET,
  STORE_GET,
  STORE_ADD,
  STORE_CHECK,
  STORE_WAIT,
  STORE_GETNUMKEYS,
  STORE_DELETE_KEY,
  STORE_APPEND,
  STORE_MULTI_GET,
  STORE_MULTI_SET,
  STORE_CANCEL_WAIT,
  STORE_PING,
  STORE_QUEUE_PUSH,
  STORE_QUEUE_POP,
  STORE_QUEUE_LEN,
};
enum { STORE_READY = 0, STORE_NOT_READY = 1 }; /* CHECK */
enum { STORE_STOP_WAITING = 0, STORE_WAIT_CANCELED = 1 }; /* WAIT, CANCEL_WAIT */

/* A server on port (0: any free one) of every local address, answering on its own thread. */
typedef struct store_server store_server;
em_status store_server_start(int port, store_server **out);
int store_server_port(const store_server *s);
void store_server_stop(store_server *s); /* NULL: nothing */

#endif
